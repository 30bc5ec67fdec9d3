"""google.colab._kernel: the kernel class Colab's IPython configuration names (c.IPKernelApp.kernel_class). Colab's
subclasses ipykernel's IPythonKernel for its front end's requests; the stand-in adds nothing but its name."""
from ipykernel.ipkernel import IPythonKernel


class Kernel(IPythonKernel):
    """ipykernel's kernel under Colab's class name."""
