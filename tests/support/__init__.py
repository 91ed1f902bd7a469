"""Code the tests share that is not a test: the CUDA emulator."""
