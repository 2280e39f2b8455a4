"""The maintainer's Python tools, run from the checkout with ``python -m scripts.<tool>``
(benchmarks, the side-by-side comparison, the soak, doc generators, the aarch64 lane's
helpers), on ``scripts.support``, the package they share with the tests. The shell entry
points and the operator files beside them are not Python. Nothing here is installed
with da3-edge."""
