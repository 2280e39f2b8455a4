"""depth-anything.cpp, the C++/ggml peer: its GGUF weights (scripts/peer/README.md)."""
