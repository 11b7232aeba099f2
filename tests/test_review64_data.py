"""Review 64 of labnn.data: the known device mistake of `recall_batch`."""

import torch

from test_device_audit import run


def test_recall_batch_puts_its_fillers_where_the_positions_are():
    # the fillers and values were drawn on the CPU and indexed by the positions on `device`:
    # on a GPU "indices should be either on cpu or on the same device as the indexed tensor"
    result = run("""
        from labnn.data.recall import recall_batch
        x, y = recall_batch(torch.tensor([0, 3], device=device), 6,
                            generator=torch.Generator().manual_seed(0))
        print(x.device, y.device)
    """)
    assert result.returncode == 0, result.stderr[-1500:]
    assert result.stdout.split()[-2:] == ["cpu:0", "cpu:0"]


def test_recall_batch_draws_the_same_batch_wherever_the_positions_are():
    # the same generator gives the same examples on the CPU and on an accelerator
    from labnn.data.recall import recall_batch

    x, y = recall_batch(torch.tensor([0, 3]), 6, generator=torch.Generator().manual_seed(0))
    result = run("""
        from labnn.data.recall import recall_batch
        x, y = recall_batch(torch.tensor([0, 3], device=device), 6,
                            generator=torch.Generator().manual_seed(0))
        print(x.cpu().tolist(), y.cpu().tolist())
    """)
    assert result.returncode == 0, result.stderr[-1500:]
    assert result.stdout.strip().splitlines()[-1] == f"{x.tolist()} {y.tolist()}"


def test_make_recall_names_inputs_on_two_devices():
    result = run("""
        from labnn.data.recall import make_recall
        try:
            make_recall(torch.full((2, 6), 9), torch.tensor([1, 2]),
                        torch.tensor([0, 3], device=device))
        except ValueError as err:
            print("refused:", err)
    """)
    assert "refused:" in result.stdout and "positions" in result.stdout, result.stderr[-1500:]
