"""One decode step recorded once and replayed: CUDA graphs, and the same bookkeeping run eagerly off CUDA.

A decode step of a small model is about 160 small kernels (a few per layer: norm, matmuls, RoPE, attention,
SwiGLU). On a GPU each launch costs the CPU a few microseconds, more than the kernel itself takes, so the GPU
waits for the CPU (docs/gpu-run.md measured it 5–30 % busy). A CUDA graph (``torch.cuda.CUDAGraph``) records the
launches of one call once; ``replay()`` sends them all in one go. vLLM and SGLang capture their decode step this
way, for a few batch sizes, over a KV cache that never moves (``static_cache.py``).

A graph replays exactly what it recorded, on exactly the memory it recorded: the tensors it read at capture are
the ones it reads at every replay. So the step's inputs live in *static buffers*, made before capture, and each
new input is **copied into** its buffer (``buffer.copy_(value)``) before ``replay()``. Binding a name to a new
tensor (``inputs["tokens"] = tokens``) changes nothing the graph sees: it replays the old tokens (a *stale
input*), silently. The capture follows PyTorch's recipe (``torch.cuda.graphs``): a few warm-up calls on a side
stream (so lazy initialisation and the allocator's first blocks happen outside the graph), then one call
recorded under ``torch.cuda.graph``. Under autocast, its weight-cast cache is switched off while capturing (a
cached cast would be a tensor the graph does not own).

Off CUDA there is no graph: :class:`StepGraph` calls the function on the same static buffers it was made with,
so the CPU runs the same bookkeeping (the copies into buffers, the bucket's rows) and the tests that check it
fail on the CPU when the bookkeeping is wrong, as the graph would replay wrongly on a GPU.
"""

import contextlib

import torch

WARMUP_CALLS = 3
"""Calls on a side stream before capture (PyTorch's examples use 3; DDP needs 11, which this step does not use)."""


def graphs_possible(device):
    """Whether a CUDA graph can be recorded on ``device`` (a CUDA device and a torch built with CUDA)."""
    return torch.device(device).type == "cuda" and torch.cuda.is_available()


def _autocast_for_capture(device_type):
    """The autocast state in force, re-entered with its cast cache off (a capture may not use the cache)."""
    if not torch.is_autocast_enabled(device_type):
        return contextlib.nullcontext()
    return torch.autocast(device_type, dtype=torch.get_autocast_dtype(device_type), cache_enabled=False)


class StepGraph:
    """``fn(**inputs)`` as a graph over static buffers: ``refresh(name, value)`` copies a new value into a buffer,
    ``replay()`` runs the recorded step and returns its output tensor (the same tensor at every replay on CUDA).

    ``fn`` must read its inputs only from ``inputs`` and tensors that never move (the cache, the weights), write
    nothing but its output and state it writes the same way at every call with the same inputs (a cache slot), and
    never ask the host for a value (no ``.item()``, no ``bool(tensor)``): a graph cannot wait for the CPU.
    ``use_graph=False`` (and any device but CUDA) calls ``fn`` eagerly on the same buffers.
    """

    def __init__(self, fn, inputs, *, use_graph, pool=None):
        self.fn, self.inputs = fn, dict(inputs)                                       # the static buffers
        self._bound = dict(inputs)             # what a graph would have recorded: rebinding inputs[name] is stale
        device = next(iter(self.inputs.values())).device
        self.use_graph = bool(use_graph) and graphs_possible(device)
        self.pool, self.graph, self.output = pool, None, None

    def refresh(self, name, value, rows=None):
        """Copy ``value`` into the static buffer ``name``, or into its rows ``rows`` (never rebind the name: the
        graph reads the buffer it recorded)."""
        if rows is None:
            self.inputs[name].copy_(value)
        else:
            self.inputs[name].index_copy_(0, rows, value)

    def replay(self):
        """The step on the buffers' current values: recorded at the first call on CUDA, replayed after."""
        if not self.use_graph:
            return self.fn(**self._bound)                                             # eager: the same buffers
        if self.graph is None:
            self._capture()
        self.graph.replay()
        return self.output

    def _capture(self):
        device_type = "cuda"
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side), _autocast_for_capture(device_type):
            for _ in range(WARMUP_CALLS):                                             # outside the graph: lazy init,
                self.fn(**self.inputs)                                                # the allocator's first blocks
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, pool=self.pool), _autocast_for_capture(device_type):
            self.output = self.fn(**self.inputs)                                      # recorded, not run
