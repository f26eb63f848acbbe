"""`make demo`: a small real job on built-in defaults, no data or network needed.

Steps (each calls the real code or driver as a user would):
  1. build each release config and print its parameter count;
  2. write a fresh Google-format (TF1) checkpoint of a tiny model;
  3. convert it with convert_checkpoint.py, TF1 -> albert_tf -> TF1;
  4. load the converted checkpoint and run the model on a batch of ids.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _step(title: str) -> None:
    print(f"\n== {title}", flush=True)


def _run_driver(script: str, *flags: str) -> None:
    command = [sys.executable, os.path.join(REPO, script), *flags]
    print("$ " + " ".join(os.path.relpath(c, os.getcwd()) if c.startswith(REPO) else c for c in command), flush=True)
    subprocess.run(command, check=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output_dir", default="demo_output")
    args = parser.parse_args(argv)
    output_dir = os.path.abspath(args.output_dir)
    os.makedirs(output_dir, exist_ok=True)
    started = time.time()

    import numpy as np

    from albert_tf import AlbertConfig, AlbertModel, AlbertPretrainer, load_checkpoint
    from albert_tf.checkpoints import save_tf1_checkpoint
    from albert_tf.modeling.models import build

    _step("1. release configs")
    for name in AlbertConfig.preset_names():
        model = build(AlbertModel(AlbertConfig.preset(name, 2)))
        print(f"albert_{name}_v2: {model.count_params():,} parameters (encoder)", flush=True)
        del model

    _step("2. a fresh Google-format checkpoint of a tiny model")
    config = AlbertConfig(vocab_size=1000, embedding_size=32, hidden_size=64, num_hidden_layers=4,
                          num_hidden_groups=2, inner_group_num=1, num_attention_heads=4,
                          intermediate_size=128, max_position_embeddings=64)
    config_file = os.path.join(output_dir, "albert_config.json")
    config.to_json_file(config_file)
    tf1_dir = os.path.join(output_dir, "google_format")
    original = build(AlbertPretrainer(config))
    save_tf1_checkpoint(original, os.path.join(tf1_dir, "model.ckpt"))
    print(f"wrote {tf1_dir}/model.ckpt with Google's variable names")

    _step("3. convert TF1 -> albert_tf -> TF1 with convert_checkpoint.py")
    ours_dir = os.path.join(output_dir, "albert_tf_format")
    back_dir = os.path.join(output_dir, "google_format_again")
    _run_driver("convert_checkpoint.py", f"--checkpoint_to_convert={tf1_dir}/model.ckpt",
                f"--albert_config_file={config_file}", f"--converted_checkpoint={ours_dir}/model.ckpt",
                "--direction=tf1_to_tf2")
    _run_driver("convert_checkpoint.py", f"--checkpoint_to_convert={ours_dir}/model.ckpt",
                f"--albert_config_file={config_file}", f"--converted_checkpoint={back_dir}/model.ckpt",
                "--direction=tf2_to_tf1")

    _step("4. run the converted model")
    model = AlbertPretrainer(config)
    print(load_checkpoint(model, ours_dir).summary())
    ids = np.array([[2, 48, 25, 21, 1289 % 1000, 3, 0, 0]], np.int32)
    inputs = {"input_ids": ids, "input_mask": (ids > 0).astype(np.int32), "segment_ids": np.zeros_like(ids),
              "masked_lm_positions": np.array([[1, 2]], np.int32)}
    mine, theirs = model(inputs), original(inputs)
    diff = float(np.abs(mine["sequence_output"].numpy() - theirs["sequence_output"].numpy()).max())
    print(f"sequence_output {tuple(mine['sequence_output'].shape)}, pooled_output "
          f"{tuple(mine['pooled_output'].shape)}, mlm_logits {tuple(mine['mlm_logits'].shape)}")
    print(f"max |converted - original| = {diff:.2e}")

    print(f"\ndone in {time.time() - started:.0f}s; outputs in {output_dir}:")
    for path in (config_file, tf1_dir, ours_dir, back_dir):
        print(f"  {path}")
    return 0 if diff == 0.0 else 1


if __name__ == "__main__":
    sys.exit(main())
