"""Strategies, precision policies, worker identity and the shared flags."""
import json
import urllib.error

import pytest
import tensorflow as tf

from albert_tf.keras import keras
from albert_tf.training import distribution


def test_one_device_uses_the_first_gpu_when_there_is_one():
    fake_gpus = [tf.config.PhysicalDevice("/physical_device:GPU:0", "GPU")]
    assert distribution.one_device_name(fake_gpus) == "/gpu:0"
    assert distribution.one_device_name([]) == "/cpu:0"


def test_one_device_and_bad_names():
    strategy = distribution.create_strategy("one_device")
    assert isinstance(strategy, tf.distribute.OneDeviceStrategy)
    assert distribution.worker_info(strategy) == distribution.WorkerInfo(1, 0, True)
    with pytest.raises(ValueError, match="one_device, mirrored, multi_worker_mirrored, tpu"):
        distribution.create_strategy("horovod")
    with pytest.raises(ValueError, match="--use_tpu conflicts"):
        distribution.create_strategy("mirrored", use_tpu=True)
    with pytest.raises(ValueError, match="--num_gpus must be >= 0"):
        distribution.create_strategy("mirrored", num_gpus=-1)


def test_tpu_path_resolves_connects_and_initializes(monkeypatch):
    calls = []

    class FakeResolver:
        def __init__(self, tpu, zone, project):
            calls.append(("resolver", tpu, zone, project))

    monkeypatch.setattr(tf.distribute.cluster_resolver, "TPUClusterResolver", FakeResolver)
    monkeypatch.setattr(tf.config, "experimental_connect_to_cluster", lambda r: calls.append("connect"))
    monkeypatch.setattr(tf.tpu.experimental, "initialize_tpu_system", lambda r: calls.append("initialize"))
    monkeypatch.setattr(tf.distribute, "TPUStrategy", lambda r: calls.append("strategy") or "tpu-strategy")
    strategy = distribution.create_strategy(use_tpu=True, master="grpc://10.0.0.2:8470", tpu_zone="us-central1-b",
                                            gcp_project="proj")
    assert strategy == "tpu-strategy"
    assert calls == [("resolver", "grpc://10.0.0.2:8470", "us-central1-b", "proj"), "connect", "initialize",
                     "strategy"]


@pytest.mark.parametrize("use_tpu, tpu_name, raised, expected", [
    (True, None, ValueError("Please provide a TPU Name to connect to."),
     "--use_tpu needs --tpu_name (the Cloud TPU's name or grpc://<ip>:8470) or --master; none given and none found "
     "(Please provide a TPU Name to connect to.). On a CPU/GPU machine drop --use_tpu"),
    (True, "my-tpu", urllib.error.URLError(OSError(-2, "Name or service not known")),
     "--use_tpu: cannot reach TPU 'my-tpu' (<urlopen error [Errno -2] Name or service not known>). Check "
     "--tpu_name/--master, --tpu_zone and --gcp_project; on a CPU/GPU machine drop --use_tpu and --tpu_name"),
    (False, "my-tpu", ValueError("x"), "--distribution_strategy=tpu: cannot reach TPU 'my-tpu' (x)"),
])
def test_an_unreachable_tpu_is_one_line_naming_the_flag(monkeypatch, use_tpu, tpu_name, raised, expected):
    """TensorFlow's and urllib's messages named no flag ("<urlopen error ...>" on a CPU machine)."""
    def fail(tpu, zone, project):
        raise raised

    monkeypatch.setattr(tf.distribute.cluster_resolver, "TPUClusterResolver", fail)
    with pytest.raises(ValueError) as caught:
        distribution.create_strategy("one_device" if use_tpu else "tpu", use_tpu=use_tpu, tpu_name=tpu_name)
    assert str(caught.value).startswith(expected)
    assert "\n" not in str(caught.value)


def test_mixed_precision_policies():
    try:
        assert distribution.set_mixed_precision("bf16") == "mixed_bfloat16"
        assert keras.mixed_precision.global_policy().name == "mixed_bfloat16"
        assert distribution.set_mixed_precision("fp16") == "mixed_float16"
        with pytest.raises(ValueError, match="none, bf16, fp16"):
            distribution.set_mixed_precision("int8")
    finally:
        distribution.set_mixed_precision("none")
    assert keras.mixed_precision.global_policy().name == "float32"


def test_tf_config_for_local_workers():
    config = json.loads(distribution.make_tf_config(["127.0.0.1:1000", "127.0.0.1:1001"], 1))
    assert config == {"cluster": {"worker": ["127.0.0.1:1000", "127.0.0.1:1001"]},
                      "task": {"type": "worker", "index": 1}}


def test_split_cpu_after_initialization_is_a_clear_error():
    tf.constant(1.0)  # devices are initialized by now in this process
    count = len(tf.config.list_logical_devices("CPU"))
    assert distribution.split_cpu_into_logical_devices(count)  # unchanged count: fine
    with pytest.raises(RuntimeError, match="already initialized"):
        distribution.split_cpu_into_logical_devices(count + 3)


# What TensorFlow raised on worker 1 asking the coordination service of a chief whose process had exited
# (two local workers: tests/data/test_feature_cache_workers.py), gRPC's trailer included.
_CHIEF_GONE = ("failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:57293: Failed to connect to "
               "remote host: Connection refused\nAdditional GRPC error information from remote target "
               "/job:worker/replica:0/task:0 while calling /tensorflow.CoordinationService/GetKeyValue:\n"
               ":UNKNOWN:Error received from peer  {grpc_status:14, grpc_message:\"failed to connect to all "
               "addresses; last error: UNKNOWN: ipv4:127.0.0.1:57293: Failed to connect to remote host: Connection "
               "refused\"}")


class _Coordination:
    def get_config_key_value(self, key, timeout_in_ms):
        raise tf.errors.UnavailableError(None, None, _CHIEF_GONE)


def test_a_chief_gone_is_said_in_our_words_without_grpcs_trailer():
    """Worker 1's line when the chief's process is gone was TensorFlow's error with gRPC's "Additional GRPC
    error information from remote target ..." (repeating it). Now: the process at the address is gone, as when
    the wait times out; a task that still listens keeps the error's own words, without the trailer."""
    import socket

    from albert_tf.training.faults import op_error_reason

    cause = ("failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:57293: Failed to connect to "
             "remote host: Connection refused")
    assert op_error_reason(tf.errors.UnavailableError(None, None, _CHIEF_GONE)) == cause
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        address = f"127.0.0.1:{listening.getsockname()[1]}"
        assert distribution._wait_for_key(_Coordination(), "key", address) == f"UnavailableError: {cause}"
    # closed: nothing listens at the address now
    assert distribution._wait_for_key(_Coordination(), "key", address) == f"its process at {address} is gone"
