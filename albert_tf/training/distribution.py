"""Strategy, precision and worker identity (the flags that choose them: ``training.flags``).

``--distribution_strategy``:
- ``one_device``: the first GPU if there is one, else the CPU.
- ``mirrored``: ``--num_gpus`` local GPUs (all when 0 is given and GPUs exist).  On a
  machine without GPUs it uses the logical CPU devices; ``--num_gpus=N`` there splits
  the CPU into N logical devices, which is how tests exercise multi-replica code.
- ``multi_worker_mirrored``: one process per machine, configured by ``TF_CONFIG``
  (see the README section "Multi-worker training").
- ``tpu`` (also implied by ``--use_tpu``): ``TPUClusterResolver`` from
  ``--tpu_name`` (or ``--master``), ``--tpu_zone``, ``--gcp_project``; the client
  connects to the cluster and initializes the TPU system before building the strategy.

``--mixed_precision``: ``none`` (float32), ``bf16`` (Keras ``mixed_bfloat16``) or
``fp16`` (``mixed_float16``; the training loop then wraps the optimizer in a
dynamic ``LossScaleOptimizer``).  Set it before building the model.
"""
from __future__ import annotations

import dataclasses
import json
import os

import tensorflow as tf
from absl import logging

from albert_tf.keras import keras

STRATEGIES = ("one_device", "mirrored", "multi_worker_mirrored", "tpu")
PRECISIONS = {"none": "float32", "bf16": "mixed_bfloat16", "fp16": "mixed_float16"}


def split_cpu_into_logical_devices(num_devices: int) -> list[str]:
    """Splits the physical CPU into ``num_devices`` logical CPUs; returns their names.

    Must run before TensorFlow initializes its devices (before any op or strategy).
    Calling it again with the same count is harmless.
    """
    if num_devices < 1:
        raise ValueError(f"num_devices must be >= 1, got {num_devices}")
    cpu = tf.config.list_physical_devices("CPU")[0]
    current = tf.config.get_logical_device_configuration(cpu)
    if (len(current) if current else 1) != num_devices:
        try:
            tf.config.set_logical_device_configuration(
                cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(num_devices)]
            )
        except RuntimeError as e:
            raise RuntimeError(
                f"cannot split the CPU into {num_devices} logical devices: TensorFlow has already "
                f"initialized its devices ({e}). Split before creating any tensor or strategy."
            ) from e
    return [d.name for d in tf.config.list_logical_devices("CPU")]


def set_mixed_precision(mixed_precision: str) -> str:
    """Sets the global Keras policy from ``none|bf16|fp16``; returns the policy name."""
    if mixed_precision not in PRECISIONS:
        raise ValueError(
            f"--mixed_precision={mixed_precision!r}: expected one of {', '.join(PRECISIONS)}"
        )
    policy = PRECISIONS[mixed_precision]
    keras.mixed_precision.set_global_policy(policy)
    return policy


def replica_device_type(strategy: tf.distribute.Strategy) -> str:
    """"CPU", "GPU" or "TPU": the kind of device the strategy's replicas run on."""
    return tf.DeviceSpec.from_string(strategy.extended.worker_devices[0]).device_type or "CPU"


def one_device_name(gpus: list) -> str:
    """``one_device`` runs on the first GPU when there is one (whatever ``--num_gpus``), else the CPU."""
    return "/gpu:0" if gpus else "/cpu:0"


def create_strategy(
    distribution_strategy: str = "one_device",
    num_gpus: int = 0,
    use_tpu: bool = False,
    tpu_name: str | None = None,
    tpu_zone: str | None = None,
    gcp_project: str | None = None,
    master: str | None = None,
) -> tf.distribute.Strategy:
    """Builds the ``tf.distribute`` strategy the flags ask for (see the module doc)."""
    if use_tpu:
        if distribution_strategy not in ("tpu", "one_device"):
            raise ValueError(
                f"--use_tpu conflicts with --distribution_strategy={distribution_strategy}"
            )
        distribution_strategy = "tpu"
    if distribution_strategy not in STRATEGIES:
        raise ValueError(
            f"--distribution_strategy={distribution_strategy!r}: expected one of {', '.join(STRATEGIES)}"
        )
    if num_gpus < 0:
        raise ValueError(f"--num_gpus must be >= 0, got {num_gpus}")

    if distribution_strategy == "tpu":
        flag = "--use_tpu" if use_tpu else "--distribution_strategy=tpu"
        return _tpu_strategy(tpu_name, tpu_zone, gcp_project, master, flag)

    gpus = tf.config.list_physical_devices("GPU")
    if distribution_strategy == "one_device":
        return tf.distribute.OneDeviceStrategy(one_device_name(gpus))

    if distribution_strategy == "mirrored":
        if gpus:
            count = num_gpus or len(gpus)
            if count > len(gpus):
                raise ValueError(f"--num_gpus={num_gpus} but only {len(gpus)} GPU(s) are visible")
            devices = [f"/gpu:{i}" for i in range(count)]
        else:
            if num_gpus > 1:
                logging.warning("No GPU found: mirroring over %d logical CPU devices.", num_gpus)
                split_cpu_into_logical_devices(num_gpus)
            devices = [d.name for d in tf.config.list_logical_devices("CPU")]
        return tf.distribute.MirroredStrategy(devices)

    # multi_worker_mirrored
    if not os.environ.get("TF_CONFIG"):
        logging.warning(
            "--distribution_strategy=multi_worker_mirrored without TF_CONFIG: running as a single worker."
        )
    return tf.distribute.MultiWorkerMirroredStrategy()


# What the resolver and the connection raise when no TPU is reachable (urllib's URLError is an OSError).
_TPU_UNREACHABLE = (ValueError, OSError, RuntimeError, tf.errors.OpError)


def _tpu_strategy(tpu_name, tpu_zone, gcp_project, master, flag: str = "--use_tpu") -> tf.distribute.Strategy:
    # Not runnable on this project's CI machines (no TPU); the calls are the documented TF2 ones.
    tpu = tpu_name or master or ""
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
            tpu=tpu, zone=tpu_zone, project=gcp_project
        )
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
    except _TPU_UNREACHABLE as e:  # TensorFlow's and urllib's messages name no flag ("<urlopen error ...>")
        reason = " ".join(str(e).split())
        if not tpu:
            raise ValueError(f"{flag} needs --tpu_name (the Cloud TPU's name or grpc://<ip>:8470) or --master; "
                             f"none given and none found ({reason}). On a CPU/GPU machine drop {flag}") from None
        raise ValueError(f"{flag}: cannot reach TPU {tpu!r} ({reason}). Check --tpu_name/--master, --tpu_zone "
                         f"and --gcp_project; on a CPU/GPU machine drop {flag} and --tpu_name") from None
    return tf.distribute.TPUStrategy(resolver)


@dataclasses.dataclass(frozen=True)
class WorkerInfo:
    """Where this process sits in a (possibly multi-worker) job."""

    num_workers: int
    worker_index: int
    is_chief: bool


def one_hot_embeddings(strategy: tf.distribute.Strategy) -> bool:
    """Whether encoders look embeddings up by a one-hot matmul: on TPUs, as the original's
    drivers did with ``use_one_hot_embeddings=FLAGS.use_tpu`` (TPUs prefer a matmul to a gather)."""
    return isinstance(strategy, tf.distribute.TPUStrategy)


def worker_info(strategy: tf.distribute.Strategy) -> WorkerInfo:
    """Number of workers, this worker's index and whether it writes checkpoints/summaries."""
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        resolver = strategy.cluster_resolver
        spec = resolver.cluster_spec().as_dict()
        task_type, task_id = resolver.task_type, resolver.task_id or 0
        workers = spec.get("worker", [])
        has_chief = bool(spec.get("chief"))
        num_workers = len(workers) + (1 if has_chief else 0) or 1
        if task_type == "chief":
            return WorkerInfo(num_workers, 0, True)
        index = task_id + (1 if has_chief else 0)
        return WorkerInfo(num_workers, index, not has_chief and task_id == 0)
    return WorkerInfo(1, 0, True)


def make_tf_config(worker_addresses: list[str], index: int) -> str:
    """The TF_CONFIG value for worker ``index`` of a job of ``worker_addresses`` (host:port)."""
    return json.dumps({"cluster": {"worker": list(worker_addresses)}, "task": {"type": "worker", "index": index}})
