import nbformat
from nbclient import NotebookClient

from labnn.training.progress import progress


def test_bar_in_an_executed_notebook_is_one_output_with_the_final_state():
    nb = nbformat.v4.new_notebook()
    nb.cells.append(nbformat.v4.new_code_cell(
        "from labnn.training.progress import progress\n"
        "import time\n"
        "bar = progress(total=30, desc='train', mininterval=0)\n"
        "for i in range(30):\n"
        "    bar.update(1)\n"
        "    bar.set_postfix(loss=f'{1 / (i + 1):.3f}')\n"
        "bar.close()\n"
    ))
    NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    outputs = nb.cells[0].outputs
    assert len(outputs) == 1, outputs
    assert not any(o.get("name") == "stderr" for o in outputs)
    text = outputs[0]["data"]["text/plain"]
    assert "train: 100%" in text and "30/30" in text and "loss=0.033" in text and "\n" not in text.strip()


def test_bar_outside_a_notebook_is_tqdm(capsys):
    for _ in progress(range(3), desc="x"):
        pass
    assert "x: 100%" in capsys.readouterr().err


def test_a_bar_in_a_log_redraws_at_most_every_few_seconds_with_its_postfix_too():
    """In a log (stderr not a terminal) tqdm redraws at most every `LOG_INTERVAL_S`, but
    `set_postfix` redrew at once: a trainer evaluating every step wrote 304 lines in 24 s."""
    import io

    log = io.StringIO()
    bar = progress(total=200, desc="train", file=log)
    for i in range(200):
        bar.update(1)
        bar.set_postfix(loss=f"{1 / (i + 1):.3f}")
    bar.close()
    draws = [line for line in log.getvalue().replace("\r", "\n").splitlines() if line]
    assert len(draws) <= 3, draws[:5]
    assert "200/200" in draws[-1] and "loss=0.005" in draws[-1]
