"""The lessons' own plumbing: reading a lesson's records, and the tables, figures and sentences it builds
from them, so that a notebook shows the CUDA, the run, the plot and the assertion.

One module per lesson (sync_vs_async for 01, api_fundamentals for 02). Every sentence a module writes is
computed from the measurements it is given: where the data could say two things, it says which one they
said.
"""
