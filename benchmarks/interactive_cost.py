"""What an interactive figure costs in the page: labnn.plot.interactive against Matplotlib's own
player (`FuncAnimation.to_jshtml`), for notebook 01's figure (one query at a time, every head of a
4-layer, 4-head model over a 27-character line: 27 frames of 16 rows x 27 keys).

    PYTHONPATH=. python benchmarks/interactive_cost.py [--json]

Prints the bytes of each HTML output (the page weight it adds). The model is untrained: the bytes
do not depend on the weights' values (PNG frames compress a little better when they are uniform).
"""

import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
from matplotlib.animation import FuncAnimation  # noqa: E402

from labnn import plot  # noqa: E402
from labnn.transformer import TransformerConfig, TransformerLM  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    line = "HAMLET:\nTo be, or not to be"
    model = TransformerLM(TransformerConfig(40, seq_len=64, d_model=128, n_heads=4,
                                            n_layers=4)).eval()
    maps = model.attention_maps(torch.randint(0, 40, (1, len(line))))
    ours = plot.attention_steps(maps, line)._repr_html_()
    rows = torch.cat([m[0] for m in maps])  # [L * H, T, T]
    result = {"frames": len(line), "labnn.plot.interactive bytes": len(ours.encode()),
              "data (JSON) bytes": len(plot.attention_steps(maps, line).to_json().encode())}
    if not args.json:
        print("\n".join(f"{k}: {v:,}" for k, v in result.items()), flush=True)
    fig, ax = plt.subplots(figsize=(plot.figures.COLUMN_WIDTH, 4.2), layout="constrained")
    image = ax.imshow(rows[:, 0].numpy(), vmin=0, vmax=0.5, aspect="auto")
    ax.set(xlabel="key", ylabel="layer x head", xticks=range(len(line)),
           xticklabels=[plot.token_label(c) for c in line])
    anim = FuncAnimation(fig, lambda q: image.set_data(rows[:, q].numpy()), frames=len(line))
    player = result["FuncAnimation.to_jshtml bytes"] = len(anim.to_jshtml().encode())
    ratio = player / result["labnn.plot.interactive bytes"]
    print(json.dumps(result) if args.json else
          f"FuncAnimation.to_jshtml bytes: {player:,} ({ratio:.1f}x labnn.plot.interactive's)")

if __name__ == "__main__":
    main()
