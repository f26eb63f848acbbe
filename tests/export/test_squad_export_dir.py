"""run_squad.py --export_dir replaces only what an earlier export of it wrote: an albert_model.tflite
there that is not a SQuAD span model (the user's) stops the run before any work, left as it was."""
import numpy as np
import pytest
import tensorflow as tf

from albert_tf import AlbertConfig
from albert_tf.squad.export import check_export_dir, export_span_model
from albert_tf.squad.heads import SquadV1Model

CONFIG = dict(vocab_size=300, embedding_size=8, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
              intermediate_size=32, max_position_embeddings=32)


class _OtherModel(tf.Module):
    """A TFLite model of someone else's: same input names, other outputs."""

    @tf.function(input_signature=[tf.TensorSpec([1, 8], tf.int32, name=name)
                                  for name in ("input_ids", "input_mask", "segment_ids")])
    def serve(self, input_ids, input_mask, segment_ids):
        return {"logits": tf.cast(input_ids + input_mask + segment_ids, tf.float32)}


def test_an_earlier_export_is_replaced_anything_else_is_refused(tmp_path):
    model = SquadV1Model(AlbertConfig(**CONFIG))
    model(model.dummy_inputs())
    _, tflite = export_span_model(model, str(tmp_path / "ours"), 16)
    assert check_export_dir(str(tmp_path / "ours")) == []
    first = open(tflite, "rb").read()
    export_span_model(model, str(tmp_path / "ours"), 24)  # a rerun replaces its own file
    assert open(tflite, "rb").read() != first

    other = _OtherModel()
    foreign = {"other_model": tf.lite.TFLiteConverter.from_concrete_functions(
                   [other.serve.get_concrete_function()], other).convert(),
               "not_tflite": b"my notes\n", "empty": b""}
    for name, content in foreign.items():
        folder = tmp_path / name
        folder.mkdir()
        (folder / "albert_model.tflite").write_bytes(content)
        (problem,) = check_export_dir(str(folder))
        assert f"{folder / 'albert_model.tflite'} is not a SQuAD span model" in problem, problem
        with pytest.raises(ValueError, match="not a SQuAD span model"):
            export_span_model(model, str(folder), 16)
        assert (folder / "albert_model.tflite").read_bytes() == content
        assert sorted(p.name for p in folder.iterdir()) == ["albert_model.tflite"]  # nothing written
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    assert check_export_dir(str(a_file)) == [f"--export_dir={a_file} is a file; expected a folder"]
    assert check_export_dir(str(tmp_path / "new")) == []
    assert np.all([not p.name.startswith(".") for p in (tmp_path / "ours").iterdir()])  # no leftovers


def test_a_full_disk_during_the_save_is_one_line_naming_the_version(tmp_path, monkeypatch, saved_model_disk_fills):
    """TensorFlow's error named the temporary version folder and its op ('{{function_node __wrapped__SaveV2...}}
    .../saved_model/.tmp-<time>-<pid>-<host>/variables/...; No space left on device [Op:SaveV2]'): now one line
    naming the version; the earlier export (version and TFLite file) is as it was, nothing is left beside it."""
    import os
    import re

    from albert_tf.training import faults

    model = SquadV1Model(AlbertConfig(**CONFIG))
    model(model.dummy_inputs())
    out = tmp_path / "out"
    export_span_model(model, str(out), 16)
    files = {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    saved_model_disk_fills()
    with pytest.raises(faults.DiskFullError) as err:
        export_span_model(model, str(out), 16)
    monkeypatch.undo()
    assert re.fullmatch(f"no space left on the device writing the export {re.escape(str(out / 'saved_model'))}/"
                        f"\\d+; what was written of it is removed; free space and rerun", str(err.value)), err.value
    assert {p: p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()} == files
    assert len(os.listdir(out / "saved_model")) == 1
