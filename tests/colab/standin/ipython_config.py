"""Colab's IPython configuration, as the Colab tier's kernels load it (tests/colab/test_tier.py copies this file to
each kernel's profile, $HOME/.ipython/profile_default/ipython_config.py). On Colab the same settings stand in the
runtime's system-wide ipython_config.py (googlecolab/colabtools), and each matters to a notebook's first cells:

- the kernel is Colab's class, google.colab._kernel.Kernel (the stand-in's subclasses ipykernel's, as Colab's does);
- google.colab is loaded as an IPython extension before any cell runs, and a failure to load it is fatal;
- output written to the process's file descriptors is not captured (capture_fd_output off, as on Colab): what a
  program's subprocess prints goes to the kernel's log, not the cell, so the course must capture its programs' output
  itself;
- logging is configured (a root handler at WARNING) before the first cell: a library's warning logged during a cell
  shows in the cell's stderr;
- history is kept in memory, matplotlib is inline, completion does not use Jedi.
"""
c = get_config()  # noqa: F821 (IPython's config loader provides it)

c.IPKernelApp.kernel_class = "google.colab._kernel.Kernel"
c.IPKernelApp.capture_fd_output = False
c.InteractiveShellApp.extensions = ["google.colab"]
c.InteractiveShellApp.reraise_ipython_extension_failures = True
c.InteractiveShellApp.exec_lines = ['__import__("logging").basicConfig()']
c.InteractiveShellApp.matplotlib = "inline"
c.HistoryManager.hist_file = ":memory:"
c.Completer.use_jedi = False
