"""``python -m scripts.compare_pytorch``: da3-edge side by side with the PyTorch reference;
the tool is scripts.support.compare_pytorch (its parts are tested there)."""
