"""The campaign under a property test of a target named with ``--oracle-target``.

Note [One campaign underneath]
------------------------------
``pytest oracle_tests --oracle-target M`` and ``kernel-oracle fuzz --targets M --op F`` must say the same
thing about M, including a module that is wrong only on some draws: a dozen derandomized examples per
property pass it where the campaign's hundred cases do not.  So a property test of a target named on the
command line does not draw its own examples: it runs, once per target, family and device in the session,
the campaign ``fuzz`` runs with its defaults (:func:`kernel_oracle.jobs.fuzz_campaign.fuzz_config`: the
same seed, case count, strategy, verdict and known upstream issues), and fails on the campaign's new
findings whose cases are of its category (:func:`categories_of`).  The tests of a family fail, together,
exactly when ``fuzz`` exits 1 for it.  The suite's own run (no ``--oracle-target``) keeps its own draws.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["campaign_findings", "categories_of", "failure_text"]


def campaign_findings(config, target_name: str, family: str, device: str, out_dir: Path) -> list:
    """The new findings (known upstream issues aside) of ``kernel-oracle fuzz --targets TARGET --op FAMILY``
    on ``device``, its files under ``out_dir``; run once per session for each target, family and device."""
    cache = config.__dict__.setdefault("_oracle_campaigns", {})
    key = (target_name, family, device)
    if key not in cache:
        from kernel_oracle.fuzz.campaign import run_campaign
        from kernel_oracle.jobs.fuzz_campaign import fuzz_config

        record = run_campaign(fuzz_config(target_name, family, device=device, out_dir=out_dir, progress=False))
        cache[key] = [f for f in record["findings"] if not f.get("known")]
    return cache[key]


def categories_of(finding: dict) -> set:
    """The case categories (``valid``, ``partial``, ``upstream``, ``malformed``) a finding's examples are
    of, ``malformed`` too when malformed metadata also showed it."""
    from kernel_oracle.harness.mutations import Mutation

    cases = [finding.get("problem"), *(e.get("problem") for e in finding.get("examples") or () if isinstance(e, dict))]
    found = set()
    for case in cases:
        if isinstance(case, dict):
            mutation = Mutation.from_dict(case.get("mutation"))
            found.add("valid" if mutation is None else mutation.category)
    return found | ({"malformed"} if finding.get("malformed_sightings") else set())


def failure_text(target_name: str, family: str, findings: list) -> str:
    """What a failing property says: the campaign, then each finding's headline and repro line."""
    lines = [f"kernel-oracle fuzz --targets {target_name} --op {family} (the same campaign) found:"]
    for f in findings:
        lines += [f"  {f['id']}: {f.get('headline') or f.get('message')}", f"    repro: {f.get('repro')}"]
    return "\n".join(lines)
