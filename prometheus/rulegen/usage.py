"""GPU-seconds per trial rank (issue 40, "Where the GPU-hours went"): how many GPU-seconds a live
rank held in each usage interval (``Settings.usage_interval``: a minute as shipped) and how many
of them its GPUs were busy (the one GPU-busy rule), so ``sum_over_time(<record>[7d])`` is the week's GPU-seconds with no multiplier.

The group runs at its own fixed interval, whatever Prometheus's evaluation interval: each sample
is one interval's GPU-seconds. Only live ranks count (promql.live_trials: fresh, no exit
marker), so an ended or killed trial whose group is still scraped holds nothing. Then each
per-rank record rolled up per trial and node with the trial's placement labels (what `usage
--by` sums, no join), the fleet's sums (what `report --usage` plots), and the GPUs no live rank
holds, with processes (per pod or Slurm job) or none.
"""

from __future__ import annotations

from typing import Any

from prometheus.rulegen.promql import live_trials
from prometheus.rulegen.settings import Settings
from trainwatch.contract.alerts import GPU_UNDERUTILIZED, TRIAL_STALE
from trainwatch.contract.checks import EXCHANGE_CAUSES
from trainwatch.contract.figures import HOST_INFO, gpu_busy, indent
from trainwatch.contract.promql import TRIAL_LABELS, by, number, on, select
from trainwatch.contract.records import (
    IDLE_CAUSES,
    OWNER_LABELS,
    ROLLUP_LABELS,
    RecordNames,
)
from trial_instrumentation import names

# The phases whose share of a rank's step time is the share of its idle GPU-seconds each cause
# gets (records.IDLE_CAUSES; the wait for the other ranks is the straggler's or the exchange's).
CAUSE_PHASES = {
    "data": (names.DATALOADER_NEXT,),
    "host_to_device": (names.TO_DEVICE, names.FROM_DEVICE),
    "wait": (names.WAIT_FOR_RANKS,),
}
_PER_TRIAL = tuple(label for label in TRIAL_LABELS if label != "rank")


def usage_group(s: Settings, n: RecordNames) -> dict[str, Any]:
    """The ``trainwatch.usage.rules`` group: GPU-seconds held, then busy, per live rank."""
    live = live_trials(s.selector("trial"), s.threshold(TRIAL_STALE))
    gpus = f"max {by(*TRIAL_LABELS, 'uuid')} ({select(names.GPU_INFO, s.selector('trial'))})"
    held = (f"{number(s.usage_seconds)} * count {by(*TRIAL_LABELS)} (\n  {gpus}\n"
            f"  and {on(*TRIAL_LABELS)}\n  {live}\n)")
    # The same GPUs as held, each busy as the one GPU-busy rule read it on average over the
    # interval (once per GPU: its record may carry two sources while GPM comes and goes), else
    # as the rule reads it now. Not the per-trial busy record, nor the per-GPU one alone: other
    # groups write them, so a usage evaluation right after a trial's first push, or Prometheus's
    # first, would find the GPUs held and none busy. Nor one instant's reading: a failed
    # exporter scrape would leave that whole interval idle.
    now = indent(gpu_busy(s.selector("exporter")), 3)
    busy = (f"{number(s.usage_seconds)} * sum {by(*TRIAL_LABELS)} (\n"
            f"  {gpus}\n  * {on('uuid')} group_left () (\n"
            f"    max {by('uuid')} (avg_over_time({n.gpu_busy}[{s.usage_interval}]))\n"
            f"    or\n    max {by('uuid')} (\n{now}\n    )\n  )\n"
            f"  and {on(*TRIAL_LABELS)}\n  {live}\n)")
    return {"name": "trainwatch.usage.rules", "interval": s.usage_interval,
            "rules": [{"record": n.gpu_seconds_held, "expr": held},
                      {"record": n.gpu_seconds_busy, "expr": busy},
                      {"record": n.gpu_seconds_idle, "expr": idle_by_cause(n)},
                      *mfu_rules(s, n), *rollups(s, n), *fleet(n),
                      *outside_trials(s, n, live)]}


def _share(n: RecordNames, phases: tuple[str, ...]) -> str:
    """The rank's share of step time in ``phases``; a NaN share (0/0: a rank whose first steps
    have not ended) is left out, or it would make every sum_over_time over it NaN."""
    regex = "|".join(phases)
    return f'sum {by(*TRIAL_LABELS)} ({n.phase_share}{{phase=~"{regex}"}} >= 0)'


def idle_by_cause(n: RecordNames) -> str:
    """Per live rank and ``cause``: its idle GPU-seconds (held less busy, at least 0) times the
    fraction of its step time in the cause's phases (CAUSE_PHASES), where those shares add up to
    more than 1 (nested phases) scaled to 1; ``other`` the rest, all of it for a rank with no
    shares. So one rank's causes add up to its idle GPU-seconds, each interval."""
    on_rank = on(*TRIAL_LABELS)
    held, busy = n.gpu_seconds_held, n.gpu_seconds_busy
    idle = f"clamp_min({held} - {on_rank} ({busy} or {held} * 0), 0)"
    every = tuple(p for phases in CAUSE_PHASES.values() for p in phases)
    norm = f"clamp_min({_share(n, every)}, 1)"
    straggler = (f'{n.exchange_cause}{{cause="{EXCHANGE_CAUSES[0]}"}}')

    def fraction(cause: str, expr: str) -> str:
        return f'label_replace(\n    {expr},\n    "cause", "{cause}", "", "")'

    def scaled(key: str) -> str:
        return f"{_share(n, CAUSE_PHASES[key])}\n    / {on_rank} {norm}"

    fractions = {
        "data": scaled("data"),
        "host_to_device": scaled("host_to_device"),
        "exchange": f"{scaled('wait')}\n    unless {on(*_PER_TRIAL)} {straggler}",
        "straggler": f"{scaled('wait')}\n    and {on(*_PER_TRIAL)} {straggler}",
        "other": (f"clamp_min(1 - (\n    {_share(n, every)}\n    / {on_rank} {norm}\n"
                  f"    or {held} * 0), 0)"),
    }
    assert tuple(fractions) == tuple(IDLE_CAUSES)
    joined = "\n  or\n  ".join(fraction(cause, expr) for cause, expr in fractions.items())
    return f"{idle}\n* {on_rank} group_right ()\n(\n  {joined}\n)"


def mfu_rules(s: Settings, n: RecordNames) -> list[dict[str, Any]]:
    """Busy GPU-seconds of ranks whose recorded MFU is under TrainwatchGPUUnderutilized's
    ``mfu_low`` (the verdict "GPU busy, MFU low"), and, for ranks with a recorded MFU, held
    GPU-seconds and held x MFU: a group's MFU is the ratio of the last two's sums."""
    on_rank = on(*TRIAL_LABELS)
    mfu = f"max {by(*TRIAL_LABELS)} ({n.mfu} >= 0)"  # no NaN into a sum over time
    low = number(s.mfu_low(GPU_UNDERUTILIZED))
    return [
        {"record": n.gpu_seconds_low_mfu,
         "expr": f"{n.gpu_seconds_busy}\nand {on_rank}\n{mfu} < {low}"},
        {"record": n.gpu_seconds_held_mfu, "expr": f"{n.gpu_seconds_held}\nand {on_rank}\n{mfu}"},
        {"record": n.gpu_seconds_model, "expr": f"{n.gpu_seconds_held}\n* {on_rank}\n{mfu}"},
    ]

def rollups(s: Settings, n: RecordNames) -> list[dict[str, Any]]:
    """Each per-rank record summed per trial and node with the trial's placement
    (ROLLUP_LABELS, from the rank's trainwatch_trial_info; a rank without one counts under
    empty labels, never nowhere): `usage --by` any of them is a plain ``sum by`` over a week
    of these, with no join and a series per trial and node instead of one per rank."""
    placement = tuple(label for label in ROLLUP_LABELS if label not in TRIAL_LABELS)
    info = (f"topk {by(*TRIAL_LABELS)} (1, max {by(*TRIAL_LABELS, *placement)} "
            f"({select(names.TRIAL_INFO, s.selector('trial'))}))")
    rules = []
    for record in n.gpu_seconds_per_rank:
        extra = ("cause",) if record == n.gpu_seconds_idle else ()
        placed = (f"{record} * {on(*TRIAL_LABELS)} group_left ({', '.join(placement)})\n"
                  f"    {info}")
        rules.append({"record": n.rolled(record),
                      "expr": (f"sum {by(*ROLLUP_LABELS, *extra)} (\n  {placed}\n"
                               f"  or {on(*TRIAL_LABELS)}\n  {record}\n)")})
    return rules


def fleet(n: RecordNames) -> list[dict[str, Any]]:
    """Held, busy and idle (by ``cause``) GPU-seconds of every live rank, summed from the
    rollups: the plots of `trainwatch report --usage` over a week read a handful of series."""
    return [{"record": n.fleet(record),
             "expr": (f"sum {by('cause')} ({n.rolled(record)})" if record == n.gpu_seconds_idle
                      else f"sum({n.rolled(record)})")}
            for record in (n.gpu_seconds_held, n.gpu_seconds_busy, n.gpu_seconds_idle)]


def outside_trials(s: Settings, n: RecordNames, live: str) -> list[dict[str, Any]]:
    """Per GPU the exporter reports (its GPU-busy rule) that no live rank holds: GPU-seconds
    with processes on it (the process collector's trainwatch_gpu_process_info, opt-in: without
    it every such GPU counts as unused), split over whom they work for (a pod, a Slurm job)
    and placed on the GPU's node, and of those the busy ones (the GPU-busy rule); and
    GPU-seconds with none."""
    gpu = ("instance", "gpu", "uuid")
    held = (f"max {by('uuid')} (\n  {select(names.GPU_INFO, s.selector('trial'))}\n"
            f"  and {on(*TRIAL_LABELS)}\n  {live}\n)")
    process_info = select("trainwatch_gpu_process_info", s.selector("exporter"))
    processes = f"max {by(*gpu)} ({process_info})"
    gpus = f"max {by(*gpu)} ({n.gpu_busy}) * 0 + 1"
    # Whom the processes work for (a pod, a Slurm job, neither: ""), each a share of the GPU's
    # interval, the shares adding up to it; then the GPU's node, where its exporter says it.
    owner = tuple(label for label in OWNER_LABELS if label != "nodename")
    owners = f"max {by(*gpu, *owner)} ({process_info})"
    shares = (f"{number(s.usage_seconds)} * (\n    {owners}\n    / {on(*gpu)} group_left ()\n"
              f"    count {by(*gpu)} ({owners})\n    and {on(*gpu)} ({gpus})\n"
              f"    unless {on('uuid')}\n    {held}\n  )")
    # One per instance: its nodename, or none where it says no trainwatch_host_info.
    node = (f"(\n    topk {by('instance')} (1, max {by('instance', 'nodename')} "
            f"({select(HOST_INFO, s.selector('exporter'))}))\n"
            f"    or {on('instance')} max {by('instance')} ({process_info}) * 0 + 1\n  )")
    return [
        {"record": n.gpu_seconds_uninstrumented,
         "expr": f"{shares}\n* {on('instance')} group_left (nodename)\n  {node}"},
        {"record": n.gpu_seconds_uninstrumented_busy,
         "expr": (f"{n.gpu_seconds_uninstrumented}\n* {on(*gpu)} group_left ()\n"
                  f"max {by(*gpu)} ({n.gpu_busy})")},
        {"record": n.gpu_seconds_unused,
         "expr": (f"{number(s.usage_seconds)} * (\n  {gpus}\n  unless {on(*gpu)} {processes}\n"
                  f"  unless {on('uuid')}\n  {held}\n)")},
    ]
