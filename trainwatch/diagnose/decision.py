"""The decision layer of `trainwatch diagnose`: each rank's figures (trainwatch.diagnose.figures)
judged with the deployed thresholds (trainwatch.diagnose.verdict, loader_cause): the verdict and
the loader's cause, the same decision for a rank over the window, young or ended."""

from __future__ import annotations

from collections.abc import Collection, Mapping

from trainwatch.contract.alerts import TRIAL_STALE
from trainwatch.diagnose import loader_cause
from trainwatch.diagnose import verdict as verdicts
from trainwatch.diagnose.deployed import Deployment
from trainwatch.diagnose.figures import (
    STALE_RANK,
    YOUNG_RANK,
    RankFacts,
    RankReport,
    gather_figures,
)
from trainwatch.diagnose.verdict import Measurements, decide
from trainwatch.promapi import PrometheusAPI


def gather(api: PrometheusAPI, deployment: Deployment, experiment: str,
           trial: str | None = None, rank: str | None = None, *,
           only: Collection[tuple[str, str, str]] | None = None,
           starts: Mapping[tuple[str, str, str], float] | None = None) -> list[RankReport]:
    """One report per rank (figures.gather_figures' selection), each with its verdict."""
    reports = []
    for report, facts in gather_figures(api, deployment, experiment, trial, rank, only=only,
                                        starts=starts):
        judge(report, facts, deployment)
        reports.append(report)
    return reports


def judge(r: RankReport, facts: RankFacts, deployment: Deployment) -> None:
    """Set ``r``'s verdict and loader cause from its figures and ``facts``."""
    alerts = deployment.alerts
    if facts.over == STALE_RANK:
        profile = decide(Measurements(dict(r.phases)), alerts)
        r.verdict = verdicts.stale(r.push_age_seconds or 0.0, alerts[TRIAL_STALE], profile,
                                   facts.life_steps, facts.cleanup or "")
        if facts.exit_reason is not None:
            r.verdict = verdicts.exited(facts.exit_reason, r.push_age_seconds or 0.0, r.verdict)
        return
    if facts.over == YOUNG_RANK:
        m = Measurements(dict(r.phases), r.node_cpu, *facts.gpu)
        r.verdict = verdicts.early(decide(m, alerts), facts.life_steps)
    else:  # MFU only here: a rate over a window the young rank's life does not fill
        mfu = r.mfu.value if r.mfu is not None else None
        m = Measurements(facts.shares, r.node_cpu, *facts.gpu, mfu=mfu)
        r.verdict = decide(m, alerts)
    r.verdict = threads_noted(r.verdict, m, facts.compute_threads, facts.loader_evidence,
                              alerts)
    r.verdict, r.loader_cause = loader_cause.explain(r.verdict, facts.loader_evidence, alerts)


def threads_noted(verdict: verdicts.Verdict, m: Measurements, threads: float | None,
                  evidence: loader_cause.LoaderEvidence | None,
                  alerts: Mapping[str, verdicts.AlertRule]) -> verdicts.Verdict:
    """``verdict`` with the compute-threads note where it holds (verdict.compute_threads_note:
    the node's cores and the trial's own CPU from the loader's evidence)."""
    figures = verdicts.ComputeThreads(threads, evidence.cpu_count if evidence else None,
                                      evidence.main_cpu if evidence else None)
    return verdicts.noted(verdict, verdicts.compute_threads_note(m, figures, alerts))
