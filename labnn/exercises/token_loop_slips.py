"""The memory slips of notebook 03's token loop that read the wrong steps' memory (the
step's own embedding put in the memory before the layers run, the memory appended one
step late): the loop written out with each, for `labnn.exercises.token_loop`.

Dimension letters: `B` batch, `T` tokens, `D` model width.
"""

from __future__ import annotations

from typing import Callable

import torch


def _loop_reading(model, tokens: torch.Tensor, reads: Callable) -> torch.Tensor:
    """The token loop in which step `t` attends to the memory vectors
    `reads(memory, x[:, t])` (right: `memory`, the vectors of the earlier steps)."""
    x = model.embed(tokens)
    memory, tops = [], []
    for t in range(tokens.size(1)):
        read = reads(memory, x[:, t])
        keys, values = model.project_memory(torch.stack(read, 1) if read else x[:, :0])
        outs = [x[:, t]]
        for i, layer in enumerate(model.layers):
            outs.append(layer(outs[-1], keys[i], values[i]))
        memory.append(model.mix(torch.stack(outs)))
        tops.append(outs[-1])
    return model.head(torch.stack(tops, 1))


def memory_slips(model, tokens: torch.Tensor) -> list[tuple[torch.Tensor, str]]:
    """(logits, message) of the two slips, for the checker's `_diagnose`."""
    return [
        (_loop_reading(model, tokens, lambda memory, x_t: memory + [x_t]),
         "step t reads its own memory: its embedding x[:, t] is in the memory before the "
         "layers run; project m_t only after the step, for later steps."),
        (_loop_reading(model, tokens, lambda memory, x_t: memory[:-1]),
         "the memory is appended one step late: step t reads m_0 .. m_{t-2}; append m_t's "
         "keys and values right after step t, so that step t + 1 reads it."),
    ]
