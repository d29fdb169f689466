"""The hand-made mutations an audit found surviving the fast suite: each must now fail a test.

Each mutation is one exact text replacement in one module, applied to a scratch copy of this
checkout; the fast test files named with it run there (``-x``). Prints, per mutation, KILLED (a test
failed) or SURVIVED, and exits non-zero if any survived. Not in CI (a minute or two).

    .venv/bin/python benchmarks/mutation/known_mutations.py [TEXT]   (TEXT: only the mutations whose line holds it)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RULES, DIAGNOSE, SESSION, RECORD = ("eagle3scope/analysis/rules.py", "eagle3scope/doctor/weight_checks.py",
                                    "eagle3scope/store/reader.py", "eagle3scope/commands/record.py")
CONTROL, VALIDATE, LOSS, CHECK, ADVISOR = (
    "eagle3scope/wire/control_protocol.py", "eagle3scope/wire/bodies.py", "eagle3scope/wire/loss.py",
    "eagle3scope/commands/check.py", "eagle3scope/analysis/advisor.py")
STATE, SUBSCRIBER, SIGNALS, CHECKPOINT, GATE, SALVAGE, CLIENT = (
    "eagle3scope/analysis/state.py", "eagle3scope/live/subscriber.py", "eagle3scope/signals.py",
    "eagle3scope/doctor/checkpoint.py", "eagle3scope/gate/decide.py", "eagle3scope/store/salvage.py",
    "eagle3scope/control/client.py")
READER, FORMAT, WRITER, METRICS, CONFIG_CHECKS = (
    "eagle3scope/store/reader.py", "eagle3scope/store/format.py", "eagle3scope/store/writer.py",
    "eagle3scope/exporter/metrics.py", "eagle3scope/doctor/config_checks.py")
BOUNDARIES = "tests/store/test_store_boundaries.py"
SCHEMA, VIEWS = "eagle3scope/wire/schema.py", "eagle3scope/analysis/views.py"
CONTRACTS = "eagle3scope/wire/contracts.py"
REPLAYER, PACING = "eagle3scope/store/replayer.py", "tests/store/test_replay_pacing.py"
AUX_CHANNEL = "instrumentation/eagle3scope_shim/aux_channel.py"
CONTROL_FACTS = "instrumentation/eagle3scope_shim/control_facts.py"
CONTROL_APPLY = "instrumentation/eagle3scope_shim/control_apply.py"

# (what, module, old text, new text, test files)
MUTATIONS = [
    ("aux-capture-off: guard for non-EAGLE-3 drafts deleted", CONTRACTS,
     "    if not is_eagle3(load):\n        return None\n    if not (wrong_algorithm", "    if not (wrong_algorithm",
     ["tests/rules/test_rules_non_eagle3.py"]),
    ("fc-bypassed: guard for drafts without an EAGLE-3 fc deleted", CONTRACTS,
     "    if fc_in is None or not is_eagle3(load):\n", "    if False:\n", ["tests/rules/test_rules_non_eagle3.py"]),
    ("fc-bypassed: the no-fc half of the guard deleted", CONTRACTS,
     "if fc_in is None or not is_eagle3(load):", "if not is_eagle3(load):",
     ["tests/rules/test_rules_non_eagle3.py"]),
    ("doctor d2t: out of range >= -> >", DIAGNOSE,
     "(as_offsets >= target_vocab)", "(as_offsets > target_vocab)", ["tests/doctor/test_doctor_d2t.py"]),
    ("doctor d2t: absolute ids in range < -> <=", DIAGNOSE,
     "d2t.max() < target_vocab", "d2t.max() <= target_vocab", ["tests/doctor/test_doctor_d2t.py"]),
    ("doctor d2t: t2d-based absolute detection off", DIAGNOSE,
     "absolute_by_t2d = t2d_ids is not None and", "absolute_by_t2d = False and", ["tests/doctor/test_doctor_d2t.py"]),
    ("store: seek_time bisect_left -> bisect_right", SESSION,
     "pos = bisect.bisect_left(self._t_keys, t_ns)", "pos = bisect.bisect_right(self._t_keys, t_ns)",
     ["tests/store/test_store_boundaries.py"]),
    ("store: seek_seq bisect_left -> bisect_right", SESSION,
     "pos = bisect.bisect_left(self._seq_keys, seq)", "pos = bisect.bisect_right(self._seq_keys, seq)",
     ["tests/store/test_store_boundaries.py"]),
    ("record: prints 0 lost frames", RECORD,
     "_progress(err, writer.steps, writer.frames, len(sub.sources), loss.lost, sub.bad_frames, writer.bytes,\n"
     "                  stop[\"elapsed\"]",
     "_progress(err, writer.steps, writer.frames, len(sub.sources), 0, sub.bad_frames, writer.bytes,\n"
     "                  stop[\"elapsed\"]", ["tests/cli/test_record_loss.py"]),
    ("record: loss counts not kept in the session file", RECORD,
     "writer.note_loss(loss.summary(sub.bad_frames))\n            writer.close()", "writer.close()",
     ["tests/cli/test_record_loss.py"]),
    # the README promises' audit (tests/reliability/test_promises.py, tests/analysis/test_advisor.py)
    ("control: the MAC no longer covers the nonce and the time", CONTROL,
     'if k != "mac")', 'if k not in ("mac", "nonce", "ts"))', ["tests/reliability/test_promises.py"]),
    ("control: the replay window only looks backwards", CONTROL,
     "not abs(now - ts) <= REPLAY_WINDOW_S", "not now - ts <= REPLAY_WINDOW_S", ["tests/reliability/test_promises.py"]),
    ("validate: negative token ids accepted", VALIDATE,
     "not 0 <= x <= MAX_TOKEN_ID", "not x <= MAX_TOKEN_ID", ["tests/reliability/test_promises.py"]),
    ("loss: the heartbeat's dropped read as a per-interval count", LOSS,
     'self.shim_dropped = _count(body.get("dropped"), dropped)',
     'self.shim_dropped = dropped + _count(body.get("dropped"), 0)', ["tests/reliability/test_promises.py"]),
    ("check/gate: incomplete evidence outranks a failure", CHECK,
     "EXIT_FAIL if failed else EXIT_INCOMPLETE if incomplete else EXIT_PASS",
     "EXIT_INCOMPLETE if incomplete else EXIT_FAIL if failed else EXIT_PASS", ["tests/reliability/test_promises.py"]),
    ("advisor: shallower settings not truncated", ADVISOR,
     "sum(count * min(a, k) for a, count in enumerate(self.accepted))",
     "sum(count * a for a, count in enumerate(self.accepted))", ["tests/analysis/test_advisor.py"]),
    ("advisor: verify cost not scaled by the tokens of the new setting", ADVISOR,
     "v.b * batch * (k + 1)", "v.b * batch * 2",
     ["tests/analysis/test_advisor.py"]),
    # the README promises mapped in TESTING.md, one planted bug each
    ("round 2 validate: a request id of exactly 4,096 characters refused", VALIDATE,
     "if type(rid) is not str or len(rid) > MAX_NAME:", "if type(rid) is not str or len(rid) >= MAX_NAME:",
     ["tests/reliability/test_promises.py"]),
    ("round 2 loss: an earlier n at the same time taken for a restart", LOSS,
     "or frame.t <= self.last_t:", "or frame.t < self.last_t:", ["tests/wire/test_loss_accounting.py"]),
    ("round 2 loss: the heartbeat's steps read from another key", LOSS,
     'self.shim_steps = _count(body.get("steps"), self.shim_steps)',
     'self.shim_steps = _count(body.get("queued"), self.shim_steps)', ["tests/wire/test_loss_accounting.py"]),
    ("round 2 state: one ended run more than 64 kept", STATE,
     "if len(self.ended_runs) >= MAX_ENDED_RUNS:", "if len(self.ended_runs) > MAX_ENDED_RUNS:",
     ["tests/wire/test_clock_order.py"]),
    ("round 2 subscriber: --max-frame-bytes not clamped to 8 MiB", SUBSCRIBER,
     "max(1024, min(int(max_frame_bytes), MAX_FRAME_BYTES))", "max(1024, int(max_frame_bytes))",
     ["tests/reliability/test_promises.py"]),
    ("round 2 signals: a signal ignored at start (nohup) caught anyway", SIGNALS,
     "if signal.getsignal(sig) is signal.SIG_IGN:", "if False:", ["tests/cli/test_signals.py"]),
    ("round 2 doctor: a config of exactly 16 MiB not read", CHECKPOINT,
     "if size > MAX_JSON_BYTES:", "if size >= MAX_JSON_BYTES:", ["tests/doctor/test_doctor_hostile.py"]),
    ("round 2 gate: a mean acceptance equal to its floor fails", GATE,
     "ok = mean >= floor", "ok = mean > floor", ["tests/gate/test_gate_judge.py"]),
    ("round 2 salvage: a missing batch row not counted as lost", SALVAGE,
     "            out.extend(range(expected, bid))\n", "", ["tests/store/test_salvage_accounting.py"]),
    ("round 2 control client: recapture sent even when not asked", CLIENT,
     'fields = {"recapture": True} if recapture else {}', 'fields = {"recapture": recapture}',
     ["tests/control/test_control_client.py"]),
    # store, exporter, doctor (each killed by a named fast test)
    ("round 4 salvage: a jump of exactly 1,024 ids no longer counted as lost batches", SALVAGE,
     "if bid - expected <= PROBE_PAST_LAST:", "if bid - expected < PROBE_PAST_LAST:",
     ["tests/store/test_salvage_accounting.py"]),
    ("round 4 reader: seek_time scans from the first batch instead of bisecting", READER,
     "pos = bisect.bisect_left(self._t_keys, t_ns)", "pos = 0", [BOUNDARIES]),
    ("round 4 reader: refresh reloads the whole catalog (each batch listed twice)", READER,
     "after = self.batches[-1].id if self.batches else -1", "after = -1", [BOUNDARIES]),
    ("round 4 format: a frame past 8 MiB accepted inside a batch", FORMAT,
     "max_bin_len=MAX_FRAME_BYTES, ", "", [BOUNDARIES]),
    ("round 4 writer: a failed write reports the frames committed as steps", WRITER,
     "self.committed_steps += self._n_steps", "self.committed_steps += n", [BOUNDARIES]),
    ("round 4 exporter: the rolling mean's HELP text says 256 request-steps", METRICS,
     '"Mean acceptance length over the last 512 request-steps."',
     '"Mean acceptance length over the last 256 request-steps."', ["tests/exporter/test_exporter.py"]),
    ("round 4 gate: a rule's evidence printed with its keys unsorted", GATE,
     "json_line(v['evidence'], sort_keys=True)", "json_line(v['evidence'])", ["tests/gate/test_gate_judge.py"]),
    ("round 4 control: a recapture's wait_s refusal names the plain bound", CONTROL,
     'f"wait_s must be a number in 0..{most}"', 'f"wait_s must be a number in 0..{MAX_WAIT_S}"',
     ["tests/control/test_control_protocol.py"]),
    ("round 4 control client: the silence message rounds the timeout to whole seconds", CLIENT,
     "within {timeout_ms / 1000:.1f}s", "within {timeout_ms / 1000:.0f}s", ["tests/control/test_control_client.py"]),
    ("round 4 doctor: multi-layer-draft's fix names the wrong release", CONFIG_CHECKS,
     '"Use SGLang 0.5.12 or newer."', '"Use SGLang 0.5.11 or newer."', ["tests/doctor/test_doctor_texts.py"]),
    # analysis and wire: bugs planted by hand, each killed by a named fast test
    ("round 4 rules: an error that turned into a warning is downgraded", RULES,
     "if SEVERITY_ORDER[severity] < SEVERITY_ORDER[previous.severity]:", "if True:",
     ["tests/rules/test_rules_evidence.py"]),
    ("round 4 validate: an unknown field may nest one level deeper than the bound", VALIDATE,
     'check_plain(item, f"{path}.{key}", 1)', 'check_plain(item, f"{path}.{key}", 0)',
     ["tests/wire/test_wire_contract.py"]),
    ("round 4 schema: a frame without a valid src is not named by its kind", SCHEMA,
     "raise FrameError(f\"frame has no publisher id 'src': {str(src)[:60]!r}\", kind=kind)",
     "raise FrameError(f\"frame has no publisher id 'src': {str(src)[:60]!r}\")", ["tests/wire/test_wire_contract.py"]),
    ("round 4 state: a duplicated frame is analysed again", STATE,
     "        if verdict is DUPLICATE:\n            return\n", "", ["tests/analysis/test_analysis.py"]),
    ("round 4 views: an unhooked seam counted among the hooks that work", VIEWS,
     'hooks_ok=sum(1 for status in seams.values() if status == "attached")',
     'hooks_ok=sum(1 for status in seams.values() if status not in ("failed", "missing"))', ["tests/analysis/test_analysis.py"]),
    ("round 4 loss: the recorder tracks one publisher past the cap", LOSS,
     "if len(self.sources) >= MAX_PUBLISHERS:", "if len(self.sources) > MAX_PUBLISHERS:",
     ["tests/wire/test_loss_accounting.py"]),
    # promised behaviours no test pinned (a rule's window, replay pacing after a seek, the v2 bonus, the
    # nonce memory) and the same gap around each; "pins" selects them
    ("pins rules: zero-acceptance reads the whole run, not its rolling window", RULES,
     "    mean = acc.mean_accept_length\n", "    mean = acc.cumulative_mean_accept_length\n",
     ["tests/rules/test_rules_evidence.py"]),
    ("pins replayer: a seek keeps the old schedule", REPLAYER,
     "            self._sched = None\n            self._last_t = self._pace_t = None",
     "            self._last_t = self._pace_t = None", [PACING]),
    ("pins replayer: a step while playing keeps the old schedule", REPLAYER,
     "                    break\n            self._sched = None\n", "                    break\n", [PACING]),
    ("pins replayer: a speed change keeps the old schedule", REPLAYER,
     "            self._speed = _clamp(value)\n            self._sched = None\n", "            self._speed = _clamp(value)\n",
     [PACING]),
    ("pins replayer: a resume keeps the schedule from before the pause", REPLAYER,
     "            self.paused = False\n            self._sched = None\n", "            self.paused = False\n", [PACING]),
    ("pins replayer: a seek keeps the old pace and the old replay time", REPLAYER,
     "            self._last_t = self._pace_t = None\n", "", [PACING]),
    ("pins replayer: paused None after a resume", REPLAYER,
     "            self.paused = False\n            self._sched = None", "            self.paused = None\n            self._sched = None",
     [PACING]),
    ("pins replayer: an overdue frame's wait is negative", REPLAYER,
     "return max(0.0, self._due_at(frame, now) - now)", "return self._due_at(frame, now) - now", [PACING]),
    ("pins replayer: a frame stamped back (not lone) due 1 ns after the one before", REPLAYER,
     "min(max(gap, 0), self._max_gap_ns)", "min(max(gap, 1), self._max_gap_ns)", [PACING]),
    ("pins replayer: a damaged last batch read past the end of the catalog", REPLAYER,
     "        while self._batch_pos < len(batches):\n            try:", "        while self._batch_pos <= len(batches):\n            try:",
     [PACING]),
    ("pins views: each rank's accept length is the whole run's", VIEWS,
     "rows = [RankRow(labels[src], pub.acceptance.mean_accept_length,",
     "rows = [RankRow(labels[src], pub.acceptance.cumulative_mean_accept_length,", ["tests/analysis/test_analysis.py"]),
    ("pins views: the panel's accept length is the whole run's", VIEWS,
     "        mean=acc.mean_accept_length,", "        mean=acc.cumulative_mean_accept_length,", ["tests/analysis/test_analysis.py"]),
    ("pins control: a parked set answered at the default wait, not its own wait_s", AUX_CHANNEL,
     "time.monotonic() + wait, queued", "time.monotonic() + DEFAULT_WAIT_S, queued", ["tests/aux/test_aux_control.py"]),
    ("pins control: the not-loopback warning leaves out the endpoint", AUX_CHANNEL,
     'is not a loopback endpoint (use an SSH tunnel)", endpoint)', 'is not a loopback endpoint (use an SSH tunnel)", None)',
     ["tests/aux/test_aux_control.py"]),
    ("pins control: the no-worker blocker's text changed", CONTROL_FACTS,
     '"no EAGLE worker in this process', '"no eagle worker in this process', ["tests/aux/test_aux_control.py"]),
    ("pins control: a refused set answered without its request id", AUX_CHANNEL,
     "        return refusal(reason, id=rid)\n", "        return refusal(reason, )\n", ["tests/aux/test_aux_control.py"]),
    ("pins control: the missing-token-file warning leaves out the variable", AUX_CHANNEL,
     'is set but %s is not", ENV_CONTROL, ENV_TOKEN_FILE)', 'is set but %s is not", ENV_CONTROL, None)',
     ["tests/aux/test_aux_control.py"]),
    ("pins control: a failed start logged without the exception's text", AUX_CHANNEL,
     'not started: %s: %s", type(exc).__name__, exc)', 'not started: %s: %s", type(exc).__name__, )',
     ["tests/aux/test_aux_control.py"]),
    ("pins control: a new channel counts one dropped answer", AUX_CHANNEL,
     "        self.dropped = 0  #", "        self.dropped = 1  #", ["tests/aux/test_aux_control.py"]),
    ("pins control: a new channel ignores the set calls the shim saw before it", AUX_CHANNEL,
     'self.current = calls[-1]["requested"] if calls else facts.configured', "self.current = facts.configured",
     ["tests/aux/test_aux_control.py"]),
    ("pins control: a message not from a REQ socket refused in other words", AUX_CHANNEL,
     '"a control request is one frame sent from a REQ socket"', '"a control request is one frame"',
     ["tests/aux/test_aux_control.py"]),
    ("pins control: a set without wait_s fails instead of waiting 2 s", AUX_CHANNEL,
     'wait = float(req.get("wait_s", DEFAULT_WAIT_S))', 'wait = float(req.get("wait_s"))', ["tests/aux/test_aux_control.py"]),
    ("pins control: a change that failed refused without its request id", CONTROL_APPLY,
     '    return refusal(reason, id=change["id"], **_ranks(restored))', "    return refusal(reason, **_ranks(restored))",
     ["tests/aux/test_aux_control.py"]),
    ("pins control: an eagle_config object read as a dict", CONTROL_FACTS,
     "eagle = eagle if isinstance(eagle, dict) else", "eagle = eagle if True else", ["tests/aux/test_aux_control.py"]),
    ("pins control: an applied change logged without its message", AUX_CHANNEL,
     'log.info("eagle3scope: aux layers set to %s (captured %s) by control request %s", entry["layers"],',
     'log.info(None, entry["layers"],', ["tests/aux/test_aux_control.py"]),
    ("pins control: a nonce forgotten one window after it was seen (a request stamped ahead replays)", AUX_CHANNEL,
     "< now - 2 * REPLAY_WINDOW_S", "< now - REPLAY_WINDOW_S", ["tests/control/test_control_protocol.py"]),
    ("pins control: a nonce forgotten at the very end of its request's window", AUX_CHANNEL,
     "< now - 2 * REPLAY_WINDOW_S", "<= now - 2 * REPLAY_WINDOW_S", ["tests/control/test_control_protocol.py"]),
]

SHIM_HOOKS, SHIM_PATCHING, SHIM_STATE = ("instrumentation/eagle3scope_shim/hooks.py",
                                         "instrumentation/eagle3scope_shim/patching.py",
                                         "instrumentation/eagle3scope_shim/shim_state.py")
GRAPH_EVIDENCE, SHIM_UNIT = "tests/shim/test_graph_evidence.py", "tests/shim/test_shim_unit.py"
HELDSEND, HELDSEND_TESTS = "instrumentation/eagle3scope_shim/heldsend.py", "tests/shim/test_heldsend.py"
SHIM_SEAMS = "instrumentation/eagle3scope_shim/seams.py"
STEP_BODY = "instrumentation/eagle3scope_shim/step_body.py"
DETACH_PLAN = "instrumentation/eagle3scope_shim/detach_plan.py"

# the shim's hook plan: the counting forward hook taken out on graph-free servers
SHIM_MUTATIONS = [
    ("round 4 shim: a prefill graph runner ignored when deciding to take the forward hook out", DETACH_PLAN,
     "    if any(graph_capture.replayed_passes(kind, worker).values()):",
     "    if any(v for k, v in graph_capture.replayed_passes(kind, worker).items() if k != \"prefill\"):", [GRAPH_EVIDENCE]),
    ("round 4 shim: adaptive steps not guarded (runners swapped in later)", DETACH_PLAN,
     "    if getattr(worker, \"adaptive_controller\", None) is not None:\n        return\n", "", [GRAPH_EVIDENCE]),
    ("round 4 shim: graph-free eager passes published as replays", SHIM_HOOKS,
     "    graph = None if shim.plan.forwards_at_callers else",
     "    graph = None if False else", [GRAPH_EVIDENCE]),
    ("round 4 shim: the decode forwards of a draft call counted as num_steps, not num_steps - 1", SHIM_HOOKS,
     "getattr(worker, \"speculative_num_steps\", 2) - 1 if mode", "getattr(worker, \"speculative_num_steps\", 2) if mode",
     [GRAPH_EVIDENCE]),
    ("round 4 shim: the own patcher detaches a wrapper that something wrapped again since", SHIM_PATCHING,
     "        if owner.__dict__.get(attr) is not wrapper:", "        if False:", [SHIM_UNIT]),
    ("round 4 shim: a v1 worker's draft model looked up under a misspelt runner", SHIM_HOOKS,
     "else getattr(worker, \"model_runner\", None)", "else getattr(worker, \"draft_model_runner\", None)", [SHIM_UNIT]),
    ("round 4 shim: a failed hook's log line leaves out the seam", SHIM_STATE,
     "log.warning(\"eagle3scope: hook %s failed and is disabled (SGLang continues unaffected): %s\", seam, detail)",
     "log.warning(\"eagle3scope: a hook failed and is disabled (SGLang continues unaffected): %s\", detail)", [SHIM_UNIT]),
    # the draft and draft-extend hooks taken out too, their work done by the step and verify
    ("round 5 shim: a draft hook that stayed in place has its work moved all the same", DETACH_PLAN,
     "        plan.draft_at_verify = shim.seams.detach(DRAFT_SEAM)",
     "        plan.draft_at_verify = shim.seams.detach(DRAFT_SEAM) or True", [GRAPH_EVIDENCE]),
    ("round 5 shim: the hooks taken out with 0 steps (SGLang drafts nothing)", DETACH_PLAN,
     "(getattr(worker, \"speculative_num_steps\", 0) or 0) > 0 and", "(getattr(worker, \"speculative_num_steps\", 0) or 0) >= 0 and",
     [GRAPH_EVIDENCE]),
    ("round 5 shim: the draft hook taken out under pipeline stages (their tail-draft unseen)", SHIM_HOOKS,
     " > 0 and stages == 1:", " > 0:", [GRAPH_EVIDENCE]),
    ("round 5 shim: a prebuilt verify input counted as a draft that ran", SHIM_HOOKS,
     "    if verify:\n        return None\n", "", [GRAPH_EVIDENCE]),
    ("round 5 bench: prefill rounds take turns with the decode rounds", "benchmarks/support/shim_toggle.py",
     "            kind = \"extend\" if batch.forward_mode.is_extend() else \"decode\"", "            kind = \"decode\"",
     ["tests/bench/test_shim_toggle.py"]),
    ("round 5 bench: the commit seam never switched (left on in the off rounds)", "benchmarks/support/shim_toggle.py",
     "            this.toggle.apply(arm == \"on\", this.commit)\n", "", ["tests/bench/test_shim_toggle.py"]),
    ("round 5 shim: the commit hook taken out under the overlap loop too", DETACH_PLAN,
     "    if getattr(shim.scheduler, \"enable_overlap\", True) is False:", "    if True:", [SHIM_UNIT]),
    ("round 5 shim: a step waits for a commit hook that was taken out", SHIM_HOOKS,
     "        key = None if plan.published_at_step or step.prefill", "        key = None if step.prefill", [SHIM_UNIT]),
    ("round 5 shim: the extend timed from the step's start, not from verify's end", SHIM_HOOKS,
     "                step.extend_ns = _now() - step.verify_end", "                step.extend_ns = _now() - step.draft_from[0]",
     [GRAPH_EVIDENCE]),
    ("round 6 shim: a spec input without spec_input_type answered from the memo", SHIM_HOOKS,
     "    if kind is None:  # a release or stand-in without it\n        return bool(spec.is_verify_input())\n", "",
     [GRAPH_EVIDENCE]),
    ("round 6 shim: the memo of enum answers grows without bound", SHIM_HOOKS,
     "        if len(memo) < MAX_MEMO:\n            memo[key] = got", "        if True:\n            memo[key] = got",
     [SHIM_UNIT]),
    ("round 6 shim: the capture's models kept across a new target", "instrumentation/eagle3scope_shim/loadreport.py",
     "    if where is None or where[0] is not target:", "    if where is None:", [SHIM_UNIT]),
    ("round 6 shim: a held send that would block is counted as sent", HELDSEND,
     "            raise zmq.Again() if code == errno.EAGAIN else zmq.ZMQError(code)",
     "            return None if code == errno.EAGAIN else None", [HELDSEND_TESTS]),
    ("round 6 shim: the first of two libzmq taken for pyzmq's", HELDSEND,
     "    return libs.pop() if len(libs) == 1 else None", "    return libs.pop() if libs else None", [HELDSEND_TESTS]),
    ("round 6 shim: a libzmq of another version trusted", HELDSEND,
     "        if tuple(p.value for p in parts) != zmq.zmq_version_info():\n            return None\n", "", [HELDSEND_TESTS]),
    ("round 6 shim: a burst sent frame by frame as it is packed", "instrumentation/eagle3scope_shim/publisher.py",
     "        burst = [self._packed(ring.popleft()) for _ in range(min(len(ring), 256))]\n        for got in burst:\n",
     "        for got in (self._packed(ring.popleft()) for _ in range(min(len(ring), 256))):\n", ["tests/live/test_transport.py"]),
    ("round 6 shim: a frame numbered before it is sent", "instrumentation/eagle3scope_shim/publisher.py",
     "            data = frame_of_packed(kind, packed, src=self.src, n=self._n, t=t, packer=self._packer)",
     "            data = frame_of_packed(kind, packed, src=self.src, n=self._n, t=t, packer=self._packer)\n            self._n += 1",
     ["tests/live/test_transport.py"]),
    ("round 6 bench: the on arm relieved of the wrong share of the publisher's per-second CPU", "benchmarks/shim/bench_shim.py",
     "own_threads[\"shim publisher\"] -= (1 - share) * _publisher_fixed(b)", "own_threads[\"shim publisher\"] -= share * _publisher_fixed(b)",
     ["tests/bench/test_shim_toggle.py"]),
    ("round 6 shim: a bell rung twice before it is heard raises in the ringer", "instrumentation/eagle3scope_shim/publisher.py",
     "        except RuntimeError:  # rung already, not yet heard", "        except ValueError:  # rung already, not yet heard",
     [SHIM_UNIT]),
    ("round 6 shim: a bell whose past deadline blocks for ever", "instrumentation/eagle3scope_shim/publisher.py",
     "        return self._lock.acquire(timeout=max(0.0, timeout))", "        return self._lock.acquire(timeout=timeout)",
     [SHIM_UNIT]),
    ("round 6 shim: viewers' subscriptions never looked for", "instrumentation/eagle3scope_shim/publisher.py",
     "                if now >= next_look:", "                if False:", ["tests/live/test_transport.py"]),
    ("round 7 bench: a restart that leaves the turns where they stood", "benchmarks/support/shim_toggle.py",
     "        self.rounds = {\"extend\": 0, \"decode\": 0}\n\n    def install",
     "        self.rounds = getattr(self, \"rounds\", None) or {\"extend\": 0, \"decode\": 0}\n\n    def install",
     ["tests/bench/test_shim_toggle.py"]),
    ("round 7 bench: one poll's frames taken for all a block left", "benchmarks/shim/bench_shim.py",
     "        got = sub.poll(timeout_ms=0)\n    return n", "        got = None\n    return n", ["tests/bench/test_shim_toggle.py"]),
    # verify's hook one body after the call, passes decided and merged on the publisher thread
    ("round 8 shim: passes alike left unmerged on the wire", STEP_BODY,
     "        if key == last:\n", "        if False:\n", [SHIM_UNIT]),
    ("round 8 shim: an EAGLE-1/2 draft's caller-read passes claimed fc-bypassed", STEP_BODY,
     "    return load.draft_fc_always or (embed is not None and width != embed)",
     "    return embed is not None and width != embed", [SHIM_UNIT]),
    ("round 8 shim: a post-only hook never takes an injected fault", "instrumentation/eagle3scope_shim/guard.py",
     "                if pre is None and shim.fault == seam:", "                if False:", [SHIM_UNIT]),
    ("round 8 shim: a post-only hook handed no start time", "instrumentation/eagle3scope_shim/guard.py",
     "            ctx = t1 = clock()", "            ctx, t1 = None, clock()", [SHIM_UNIT]),
    ("round 8 shim: the draft timed to verify's end, not its start", SHIM_HOOKS,
     "        step.draft_ns = verify_began - began[0]", "        step.draft_ns = _now() - began[0]", [GRAPH_EVIDENCE]),
    ("pins shim: a v1 verify of 0.5.10 (accept_length_per_req_cpu) unread", SHIM_SEAMS,
     'V1_COUNT_FIELDS = ("accept_length_per_req_cpu", ', "V1_COUNT_FIELDS = (", [SHIM_UNIT]),
    ("pins shim: a v1 verify of 0.5.12 on (num_correct_drafts_per_req_cpu) unread", SHIM_SEAMS,
     ', "num_correct_drafts_per_req_cpu")', ")", [SHIM_UNIT]),
    ("pins shim: a v1 verify's tokens before 0.5.12 (verified_id) unread", SHIM_SEAMS,
     'V1_TOKEN_FIELDS = ("verified_id", "accept_tokens")', 'V1_TOKEN_FIELDS = ("accept_tokens",)', [SHIM_UNIT]),
    ("pins shim: a v1 call timed as the clock's sum, not its difference", SHIM_HOOKS,
     "            setattr(step, slot, _now() - t0)", "            setattr(step, slot, _now() + t0)", [SHIM_UNIT]),
    ("pins shim: a v2 worker's draft embedding width never read", SHIM_HOOKS,
     "load.draft_embed_width = _embed_width(draft) or", "load.draft_embed_width = _embed_width(None) or", [SHIM_UNIT]),
    ("pins shim: a v2 worker without _draft_worker taken for a stage without the draft", SHIM_HOOKS,
     'if getattr(self, "_draft_worker", self) is None:', 'if getattr(self, "_draft_worker", None) is None:', [SHIM_UNIT]),
    ("pins shim: a broadcast's recv_reqs by keyword loses the pulled requests", SHIM_HOOKS,
     '"recv_reqs": collective.inject(reqs, change)})', '"recv_reqs": collective.inject(change)})', ["tests/aux/test_aux_tp.py"]),
    ("pins shim: a CPU tree path of one request read as flat (IndexError)", STEP_BODY,
     "    if flat and type(flat[0]) is list:", "    if flat and type(flat[1]) is list:", [SHIM_UNIT]),
    ("pins shim: a v2 request that committed nothing reported with a bonus", STEP_BODY,
     "accepted[i], bonus[i] = max(n - 1, 0), 1 if n > 0 else 0", "accepted[i], bonus[i] = max(n - 1, 0), 1", [SHIM_UNIT]),
]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    chosen = [m for m in MUTATIONS + SHIM_MUTATIONS if not argv or any(word in m[0] for word in argv)]
    survived = 0
    with tempfile.TemporaryDirectory(prefix="known-mutations-") as tmp:
        work = Path(tmp)
        names = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, check=True,
                               capture_output=True).stdout.decode().split("\0")
        for name in filter(None, names):
            if (REPO / name).is_file():
                (work / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(REPO / name, work / name)
        env = {**os.environ, "PYTHONPATH": f"{work}:{work / 'instrumentation'}"}

        def pytest(tests):
            return subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests],
                                  cwd=work, capture_output=True, text=True, timeout=600, env=env)

        baseline = pytest(sorted({t for *_, tests in chosen for t in tests}))
        if baseline.returncode != 0:
            print(f"the unmutated tests fail in the scratch copy:\n{baseline.stdout[-3000:]}")
            return 2
        for what, module, old, new, tests in chosen:
            path = work / module
            original = path.read_text()
            if original.count(old) != 1:
                print(f"STALE     {what}: the text to mutate is not in {module} exactly once")
                survived += 1
                continue
            path.write_text(original.replace(old, new))
            try:
                done = pytest(tests)
            finally:
                path.write_text(original)
            killed = done.returncode != 0
            survived += not killed
            print(f"{'KILLED' if killed else 'SURVIVED':<9} {what}  ({' '.join(tests)})", flush=True)
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
