"""Code the tests share that is not a test: the CUDA emulator and the CuPy stand-in."""
