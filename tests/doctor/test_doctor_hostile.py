"""doctor and fix on hostile checkpoints: wrong-typed config fields, FIFOs, links out of the draft
directory, a sparse giant d2t, damaged headers, an unwritable --out. Nothing may hang, raise, read
outside the directory or allocate more than the stated bound; every problem is a finding.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.support import draft_checkpoints as dc
from eagle3scope.doctor.checkpoint import MAX_VECTOR_BYTES
from support.cli import run
from eagle3scope.doctor.run_checks import diagnose
from eagle3scope.doctor.repair import FixRefused, fix_checkpoint

REPO = Path(__file__).resolve().parents[2]
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
FIELDS = ["hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim", "intermediate_size", "vocab_size",
          "draft_vocab_size", "num_hidden_layers", "target_hidden_size", "tie_word_embeddings", "architectures",
          "eagle_config", "model_type", "num_aux_hidden_states", "bias", "rms_norm_eps", "norm_before_fc",
          "eagle_aux_hidden_state_layer_ids", "speculators_model_type", "transformer_layer_config",
          "speculators_config", "norm_before_residual", "eagle3scope_fix", "text_config"]


def run_cli(*args, timeout: float = 60) -> subprocess.CompletedProcess:
    """The real CLI in a subprocess: a hang is a timeout, a traceback is on stderr."""
    return run(*args, cwd=REPO, timeout=timeout)


def no_traceback(report: dict) -> None:
    assert not [f for f in report["findings"] if f["id"] == "check-failed"], report["findings"]


@pytest.mark.parametrize("config", [
    {"eagle_config": 5}, {"hidden_size": 0}, {"num_hidden_layers": "2"}, {"hidden_size": True},
    {"eagle_config": {"eagle_aux_hidden_state_layer_ids": "1,2,3"}}, {"architectures": "LlamaForCausalLMEagle3"},
    {"draft_vocab_size": -1}, {"num_attention_heads": 3}, {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2.5]}},
    {"hidden_size": 2**80},
], ids=lambda c: json.dumps(c)[:40])
def test_wrong_typed_fields_are_findings(tmp_path, config):
    draft = dc.write(tmp_path / "d", dc.tensors(), {**dc.specforge_config(), **config})
    report = diagnose(draft, sglang_version="0.5.23").to_dict()
    no_traceback(report)
    assert "config-field-invalid" in {f["id"] for f in report["findings"]}
    assert {"weights-dropped", "d2t-absolute"}.isdisjoint(f["id"] for f in report["findings"])  # the rest still ran
    with pytest.raises(FixRefused):
        fix_checkpoint(draft, tmp_path / "out", sglang_version="0.5.23")


@pytest.mark.parametrize("text", ["[1, 2]", "5", "null", '"x"', "{", "\xff\xfe", "[" * 5000 + "]" * 5000])
def test_config_that_is_not_an_object(tmp_path, text):
    draft = dc.write(tmp_path / "d", dc.tensors(), None)
    (draft / "config.json").write_bytes(text.encode("utf-8", "surrogateescape") if isinstance(text, str) else text)
    report = diagnose(draft, sglang_version="0.5.10").to_dict()
    no_traceback(report)
    assert {f["id"] for f in report["findings"]} >= {"config-missing"}


@pytest.mark.parametrize("index", ['{"weight_map": []}', '{"weight_map": {"fc.weight": 3}}', "[]",
                                   '{"weight_map": {"fc.weight": "../../etc/passwd"}}', "{}"])
def test_damaged_shard_index(tmp_path, index):
    draft = dc.write(tmp_path / "d", dc.tensors(), dc.specforge_config(), shards=2)
    (draft / "model.safetensors.index.json").write_text(index)
    report = diagnose(draft, sglang_version="0.5.23").to_dict()
    no_traceback(report)
    assert "weights-unreadable" in {f["id"] for f in report["findings"]}


def test_fifo_named_safetensors_is_not_opened(tmp_path):
    draft = dc.specforge(tmp_path / "d")
    os.mkfifo(draft / "extra.safetensors")
    os.mkfifo(draft / "tokenizer.json")
    done = run_cli("doctor", draft, "--json", timeout=60)  # opening a FIFO would block forever
    report = json.loads(done.stdout)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    unsafe = [f["evidence"]["detail"] for f in report["findings"] if f["id"] == "unsafe-entry"]
    assert sorted(unsafe) == ["extra.safetensors is a FIFO: not opened", "tokenizer.json is a FIFO: not opened"]
    done = run_cli("fix", draft, "--out", tmp_path / "out", timeout=60)
    assert done.returncode == 2 and "FIFO" in done.stderr and not (tmp_path / "out").exists()


def test_links_out_of_the_draft_directory_are_refused(tmp_path):
    draft = dc.specforge(tmp_path / "d")
    secret = tmp_path / "secret.txt"
    secret.write_text("not yours")
    (draft / "tokenizer.json").symlink_to(secret)
    (draft / "more.safetensors").symlink_to("/dev/zero")
    (draft / "inside.json").symlink_to(draft / "config.json")  # a link that stays inside is fine
    report = diagnose(draft, sglang_version="0.5.23").to_dict()
    details = sorted(f["evidence"]["detail"] for f in report["findings"] if f["id"] == "unsafe-entry")
    assert len(details) == 2 and all("outside the draft directory: not followed" in d for d in details)
    with pytest.raises(FixRefused, match="not followed"):
        fix_checkpoint(draft, tmp_path / "out", sglang_version="0.5.23")
    assert not (tmp_path / "out").exists()


def test_hub_snapshot_links_into_blobs_are_followed(tmp_path):
    """A Hugging Face hub download: snapshots/<rev>/* are links to ../../blobs/<hash>."""
    src = dc.specforge(tmp_path / "src")
    repo = tmp_path / "models--org--draft"
    (repo / "blobs").mkdir(parents=True)
    snapshot = repo / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    for i, f in enumerate(sorted(src.iterdir())):
        blob = repo / "blobs" / f"blob{i}"
        blob.write_bytes(f.read_bytes())
        (snapshot / f.name).symlink_to(Path("../../blobs") / blob.name)
    assert diagnose(snapshot, sglang_version="0.5.23").exit_code == 0
    result = fix_checkpoint(snapshot, tmp_path / "fixed", sglang_version="0.5.10")
    assert not any(p.is_symlink() for p in result.out.iterdir())


def sparse_d2t(path: Path, rows: int) -> Path:
    """A safetensors file whose d2t declares ``rows`` int64 values, written sparse (no real bytes)."""
    header = json.dumps({"d2t": {"dtype": "I64", "shape": [rows], "data_offsets": [0, rows * 8]}}).encode()
    header += b" " * (-len(header) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header)
        f.truncate(8 + len(header) + rows * 8)
    return path


def test_sparse_giant_d2t_is_not_loaded(tmp_path):
    rows = 32 << 20  # 256 MiB of int64
    draft = dc.write(tmp_path / "d", {k: v for k, v in dc.tensors().items() if k != "d2t"},
                     dc.specforge_config(draft_vocab_size=rows))
    sparse_d2t(draft / "vocab.safetensors", rows)
    # VmHWM, not ru_maxrss: Linux carries the forking parent's (pytest's) high-water mark across exec
    # into ru_maxrss, so a long suite's own size showed up as the doctor's.
    code = ("import json, sys; from eagle3scope.doctor.run_checks import diagnose; "
            "r = diagnose(sys.argv[1], sglang_version='0.5.23').to_dict(); "
            "hwm = next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmHWM:')); "
            "print(json.dumps([r, hwm]))")
    done = subprocess.run([sys.executable, "-c", code, str(draft)], cwd=REPO, capture_output=True, text=True, timeout=120)
    report, peak_kib = json.loads(done.stdout)
    unchecked = [f for f in report["findings"] if f["id"] == "d2t-unchecked"]
    assert unchecked and str(MAX_VECTOR_BYTES) in unchecked[0]["evidence"]["detail"]
    assert peak_kib < 200 * 1024, peak_kib  # the interpreter and numpy; nothing near 256 MiB


def test_headers_that_lie_about_their_data(tmp_path):
    draft = dc.specforge(tmp_path / "d")
    for name, header in (("neg.safetensors", {"x": {"dtype": "F16", "shape": [-1], "data_offsets": [0, 0]}}),
                         ("big.safetensors", {"x": {"dtype": "F16", "shape": [2**40], "data_offsets": [0, 2**41]}}),
                         ("type.safetensors", {"x": {"dtype": "F99", "shape": [1], "data_offsets": [0, 2]}}),
                         ("list.safetensors", [1, 2])):
        raw = json.dumps(header).encode()
        (draft / name).write_bytes(struct.pack("<Q", len(raw)) + raw)
    (draft / "huge.safetensors").write_bytes(struct.pack("<Q", 2**62))
    report = diagnose(draft, sglang_version="0.5.23").to_dict()
    no_traceback(report)
    assert len([f for f in report["findings"] if f["id"] == "weights-unreadable"]) == 5


def test_unwritable_out_is_a_clear_error(tmp_path):
    draft = dc.speculators(tmp_path / "d")
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    done = run_cli("fix", draft, "--out", blocker / "new", "--for-sglang", "0.5.23")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.startswith("Error: cannot write") and "Not a directory" in done.stderr


def test_doctor_does_not_hang_on_a_fifo_config(tmp_path):
    draft = dc.write(tmp_path / "d", dc.tensors(), None)
    os.mkfifo(draft / "config.json")
    result: dict = {}
    worker = threading.Thread(target=lambda: result.update(r=diagnose(draft, sglang_version="0.5.23").to_dict()), daemon=True)
    worker.start()
    worker.join(20)
    assert not worker.is_alive(), "doctor blocked on a FIFO"
    assert "config.json is a FIFO" in result["r"]["findings"][0]["evidence"]["detail"]


# -- property-based: any JSON in any config field, any bytes in the header --------------------------

CASES = {"config": 0, "header": 0}


@settings(max_examples=int(os.environ.get("EAGLE3SCOPE_FUZZ_EXAMPLES", 150)), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(FIELDS), json_values), min_size=1, max_size=4),
       st.sampled_from(["specforge", "speculators"]), st.sampled_from(["0.5.10", "0.5.23"]))
def test_any_config_values(tmp_path_factory, edits, layout, version):
    CASES["config"] += 1
    root = tmp_path_factory.mktemp("cfg")
    config = dc.specforge_config() if layout == "specforge" else dc.speculators_config()
    for key, value in edits:
        config[key] = value
    draft = dc.write(root / "d", dc.tensors("layers.0." if layout == "speculators" else "midlayer."), config)
    no_traceback(diagnose(draft, sglang_version=version).to_dict())
    try:
        fix_checkpoint(draft, root / "out", sglang_version=version)
    except FixRefused:
        pass


@settings(max_examples=int(os.environ.get("EAGLE3SCOPE_FUZZ_EXAMPLES", 150)), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(json_values.map(lambda v: json.dumps(v).encode()), st.binary(max_size=64)),
       st.integers(0, 2**64 - 1) | st.none())
def test_any_header_bytes(tmp_path_factory, header, declared):
    CASES["header"] += 1
    draft = dc.write(tmp_path_factory.mktemp("hdr") / "d", dc.tensors(), dc.specforge_config())
    length = len(header) if declared is None else declared
    (draft / "x.safetensors").write_bytes(struct.pack("<Q", length) + header + b"\0" * 16)
    report = diagnose(draft, sglang_version="0.5.23").to_dict()
    no_traceback(report)
    assert "weights-unreadable" in {f["id"] for f in report["findings"]}  # 16 zero bytes are never a valid file


def test_a_config_past_16_mib_is_not_read_and_one_at_it_is(tmp_path):
    """README "Bounds": config.json is read up to 16 MiB (whitespace pads a valid config to the size)."""
    from eagle3scope.doctor.checkpoint import MAX_JSON_BYTES

    assert MAX_JSON_BYTES == 16 << 20
    text = json.dumps(dc.specforge_config())
    for size, readable in ((MAX_JSON_BYTES, True), (MAX_JSON_BYTES + 1, False)):
        draft = dc.write(tmp_path / f"d{size}", dc.tensors(), None)
        (draft / "config.json").write_text(text + " " * (size - len(text)))
        report = diagnose(draft, sglang_version="0.5.23").to_dict()
        no_traceback(report)
        assert ("config-missing" not in {f["id"] for f in report["findings"]}) == readable, size
