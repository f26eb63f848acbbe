"""MirroredStrategy (2 logical CPUs) and MultiWorkerMirroredStrategy (2 local workers) give the
one-device run's losses, final weights and eval results on the same global batches."""
import json

import numpy as np

from albert_tf.training.distribution import make_tf_config

COMMON = ["--dropout=0", "--num_train_steps=6", "--log_steps=1", "--eval_at_end"]


def check_against_reference(out, dump, reference, scalars, same_weights):
    got = dict(np.load(dump))
    assert int(got.pop("__global_step__")) == 6
    same_weights(got, reference["weights"], atol=1e-5)
    losses = scalars(out, "loss")
    assert sorted(losses) == [1, 2, 3, 4, 5, 6]
    np.testing.assert_allclose([losses[s] for s in sorted(losses)],
                               [reference["losses"][s] for s in sorted(losses)], rtol=0, atol=1e-5)
    results = json.loads(open(str(dump) + ".json").read())["eval"]
    for key in ("accuracy", "weighted_accuracy"):  # counts over all 23 eval examples: exact
        assert results[key] == reference["eval"][key], key
    for key in ("loss", "mean_logit"):
        assert abs(results[key] - reference["eval"][key]) < 1e-5, key


def test_mirrored_two_logical_cpus_matches_one_device(toy_process, tmp_path, reference_plain, scalars,
                                                       same_weights):
    out, dump = tmp_path / "mirrored", tmp_path / "mirrored.npz"
    run = toy_process(out, *COMMON, "--distribution_strategy=mirrored", "--num_gpus=2", f"--dump={dump}")
    assert run.wait() == 0, run.log()
    assert "2 logical CPU devices" in run.log()
    check_against_reference(out, dump, reference_plain, scalars, same_weights)


def test_multi_worker_two_processes_matches_one_device(toy_process, tmp_path, reference_plain, scalars,
                                                        same_weights, ports):
    out, dump = tmp_path / "multi_worker", tmp_path / "multi_worker.npz"
    addresses = [f"127.0.0.1:{ports()}", f"127.0.0.1:{ports()}"]
    workers = [
        toy_process(out, *COMMON, "--distribution_strategy=multi_worker_mirrored", f"--dump={dump}",
                    env={"TF_CONFIG": make_tf_config(addresses, index)}, name=f"worker{index}")
        for index in range(2)
    ]
    for worker in workers:
        assert worker.wait(timeout=240) == 0, worker.log()
    check_against_reference(out, dump, reference_plain, scalars, same_weights)
    # Each worker saved its own input position beside the chief's checkpoint.
    assert (out / "model.ckpt-6.input-0.index").exists() and (out / "model.ckpt-6.input-1.index").exists()
