"""A wrong value in a cluster or training file is quoted as TOML spells it, the way the
user wrote it: TOML's booleans are lowercase (toml.io v1.0.0, "Boolean") and its arrays
hold them so; Python's ``True`` and ``[True]`` are nowhere in a TOML file."""

from __future__ import annotations

import pytest

from pipesim.cli import main

CLUSTER = """\
name = "x"
gpu = "X"
gpus = 16
gpus_per_node = 8
bf16_tflops = 989
fp8_tflops = 1979
memory_mib = 81559
nvlink_gbps = 360
network_gbps = 50
"""


@pytest.mark.parametrize(
    "kind,line,message",
    [
        ("cluster", "gpu = true", "gpu must be a string, got true"),
        ("cluster", "nccl_protocols = [false]", "nccl_protocols must be true or false, got [false]"),
        ("cluster", "nccl_algorithms = [true]", "nccl_algorithms must be a list of 'ring' and 'tree' holding \"ring\""),
        ("cluster", "nccl_algorithms = true", '(e.g. ["ring", "tree"], or ["ring"] for the ring alone), got true'),
        ("cluster", "nccl_algorithms = [true]", "for the ring alone), got [true]"),
        ("training", "micro_batch_sizes = [true, 2]", "micro_batch_sizes must be a list of up to 64 whole numbers"),
        ("training", "micro_batch_sizes = [true, 2]", "from 1 to 16,000,000, got [true, 2]"),
        ("training", "precision = false", "precision must be a string, got false"),
        ("training", "tp_overlap = [true]", "tp_overlap must be one of none, backward, all, micro_pipeline"),
        ("training", "tp_overlap = [true]", "(true: all, false: none), got [true]"),
        ("training", 'p2p_sync = "always"', "p2p_sync must be one of none, megatron-core, megatron-2021, got 'always'"),
    ],
)
def test_a_wrong_value_is_quoted_as_toml_spells_it(capsys, tmp_path, kind, line, message):
    f = tmp_path / f"{kind}.toml"
    if kind == "cluster":
        f.write_text(CLUSTER.replace('gpu = "X"\n', "") + line + "\n" if line.startswith("gpu ") else CLUSTER + line + "\n")
        argv = ["--cluster", f]
    else:
        f.write_text(line + "\n")
        argv = ["--cluster", "h100", "--gpus", 16, "--training", f]
    code = main(["memory", "--model", "llama3-8b", "--pp", "2", *map(str, argv)])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err
    assert message in err, err
    assert "True" not in err and "False" not in err


def test_a_cluster_of_part_nodes_is_refused(capsys, tmp_path):
    # 12 GPUs at 8 a node read as one node before; --gpus already refused the same count
    f = tmp_path / "cluster.toml"
    f.write_text(CLUSTER.replace("gpus = 16\n", "gpus = 12\n"))
    code = main(["memory", "--model", "llama3-8b", "--pp", "2", "--cluster", str(f)])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "gpus = 12 is not a whole number of 8-GPU nodes (gpus_per_node); give 8 or 16" in err, err


def test_a_gradient_reduction_wider_than_any_element_is_refused(capsys, tmp_path):
    f = tmp_path / "t.toml"
    f.write_text("grad_reduce_bytes = 1000\n")
    code = main(["memory", "--model", "llama3-8b", "--pp", "2", "--cluster", "h100", "--gpus", "16", "--training", str(f)])
    out, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1 and "grad_reduce_bytes" in err and "64" in err, err


@pytest.mark.parametrize(
    "line, said",
    [
        # docs/training-and-cluster.md: seq 1 to 100,000,000, global_batch 1 to 16,000,000
        ("global_batch = 1.5", "global_batch must be a whole number from 1 to 16,000,000, got 1.5"),
        ("seq = 0", "seq must be a whole number from 1 to 100,000,000, got 0"),
    ],
)
def test_a_training_count_out_of_range_names_the_range_it_takes(capsys, tmp_path, line, said):
    f = tmp_path / "t.toml"
    f.write_text(line + "\n")
    assert main(["memory", "--model", "llama3-8b", "--pp", "2", "--training", str(f)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and said in err, err


def test_a_cluster_file_given_as_the_model_names_the_flag_it_belongs_to(capsys, tmp_path):
    """--model h100.toml and --cluster llama.toml were refused as "unknown key 'gpu'" (or
    'layers') followed by the other file's keys: the paths were swapped, which no line said."""
    cluster, model = tmp_path / "c.toml", tmp_path / "m.toml"
    cluster.write_text(CLUSTER)
    model.write_text('name = "m"\nlayers = 2\nhidden = 64\nheads = 4\nvocab = 10\n[mlp]\ndense_ffn = 64\n')
    assert main(["plan", "--model", str(cluster), "--cluster", str(model)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is a cluster file (gpus, gpus_per_node, bf16_tflops, memory_mib), given to --model" in err
    assert main(["memory", "--model", "llama3-8b", "--cluster", str(model), "--pp", "1"]) == 2
    err = capsys.readouterr().err
    assert (
        err.count("\n") == 1
        and "m.toml is a model file (layers, hidden, heads, vocab), given to --cluster: give it to --model" in err
    )


@pytest.mark.parametrize(
    "key, said",
    [
        # what each key holds, with the h100 preset's figure (docs/training-and-cluster.md)
        ("memory_mib", "give device memory in MiB as nvidia-smi --query-gpu=memory.total reports it, e.g. memory_mib = 81559"),
        ("network_gbps", "give the NIC's line rate a GPU one way in GB/s, e.g. network_gbps = 50 (a 400 Gb/s NIC)"),
        ("bf16_tflops", "give dense BF16 peak a GPU in TFLOP/s, e.g. bf16_tflops = 989 (H100 SXM)"),
    ],
)
def test_a_missing_cluster_key_says_what_it_holds(capsys, tmp_path, key, said):
    # "missing field 'memory_mib'" left the unit to guess, where MiB against GB is the slip
    f = tmp_path / "c.toml"
    f.write_text("\n".join(line for line in CLUSTER.splitlines() if not line.startswith(f"{key} =")) + "\n")
    assert main(["memory", "--model", "llama3-8b", "--cluster", str(f), "--pp", "2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"missing key {key!r}: {said}" in err, err
