"""A GPU memory leak to trace on a machine WITHOUT a GPU.

It calls the CUDA runtime's cudaMalloc and cudaFree through ctypes. Run it
through examples/no-gpu-demo.sh, which puts the test suite's fake CUDA
runtime and driver (tests/fake-cuda: no GPU, no real memory) first on
LD_LIBRARY_PATH and traces it with `cudatrace run`; on a machine with CUDA
it runs against the real libcudart.so.13 too.

Five training steps: each allocates 64 MiB of activations and frees them,
and allocates 8 MiB of gradients that it keeps in a list and never frees.
The trace holds 10 allocations and 5 frees; the peak is 104 MiB (four kept
gradients, plus the fifth step's activations and gradients), and 40 MiB in
5 allocations are live at exit, all made by the line in keep_gradients.
"""
import ctypes
import sys

MiB = 1 << 20
STEPS = 5


def load_runtime():
    try:
        return ctypes.CDLL("libcudart.so.13")
    except OSError as error:
        sys.exit(f"no_gpu_demo.py: cannot load libcudart.so.13 ({error}); "
                 "run it through examples/no-gpu-demo.sh")


cudart = load_runtime()
cudart.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
cudart.cudaFree.argtypes = [ctypes.c_void_p]


def check(status, call):
    if status != 0:
        sys.exit(f"no_gpu_demo.py: {call} failed with CUDA error {status}")


def forward(step):
    """The step's activations: allocated, then freed at the end of the step."""
    activations = ctypes.c_void_p()
    check(cudart.cudaMalloc(ctypes.byref(activations), 64 * MiB), "cudaMalloc")
    return activations


def keep_gradients(step, history):
    """The leak: each step's gradients are kept in `history` and never freed."""
    gradients = ctypes.c_void_p()
    check(cudart.cudaMalloc(ctypes.byref(gradients), 8 * MiB), "cudaMalloc")
    history.append(gradients)


def train():
    history = []
    for step in range(STEPS):
        activations = forward(step)
        keep_gradients(step, history)
        check(cudart.cudaFree(activations), "cudaFree")
    print(f"no_gpu_demo.py: {STEPS} steps done, {len(history)} gradient buffers "
          f"({len(history) * 8} MiB) still allocated")


if __name__ == "__main__":
    train()
