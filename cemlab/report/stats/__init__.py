"""Paired comparisons over seeds on the log scale: the tests, the interval that decided, the verdict word.

Modules: ``significance`` (the tests and the verdict words), ``decision`` (the decision from
p-values), ``bounds`` (the interval that decided, one comparison judged), ``divergence`` (the worst
outcomes' scoring); and the report's other statistics: ``sequential`` (the looks' levels; the looks
themselves judge claims and live above them, ``cemlab.report.looks``), ``trend`` (the ladder's
trends), ``akima`` (Akima optima).

A claim compares two (or more) grid cells that differ in one setting. Runs with the same seed see
the same data order and, where the shapes allow, the same initial embedding, so the comparison is
made per seed (a *paired* difference) and the seeds are the replicates. The difference is a linear
combination of the compared cells' **log** metrics (``cemlab.report.claims.pairing.compare``)::

    d_s = sum_i c_i log(value of cell i at seed s)      e.g. log ppl_B(s) - log ppl_A(s) = log(ppl_B / ppl_A)
    effect = mean_s d_s        shown as the relative change exp(effect) - 1

A seed enters where every compared cell has an outcome there: a finished run, or a worst outcome (a
divergence, a metric that is not finite or no better than chance: ``divergence.outcomes``), which
ranks below every finished run and is scored where it weakens no test against its cell: at the
t statistic's peak given the choice's finished seeds where those lean against it, else as the worst
finished run of the choice (``paired_diffs_by_seed``). Tolerances and margins are relative changes compared as log(1 + tol).

**Tests.** One-sided paired t-tests against the tolerance (``t_pvalues``; an exact sign test,
``sign_pvalues``, for an effect that takes few values). Where a position of a comparison may be one
of several cells (learning rates, the best of several variants) ``every_choice_p`` tests every
choice, with a Bonferroni factor over the choices that may be picked. ``decide`` combines a claim's
planned comparisons: intersection-union for the support of ``all`` claims, Holm over the k planned
comparisons for their contradiction and for the support of ``any`` claims.

**Levels.** ``decide`` takes the claim's two-sided error rate ``alpha`` (``ALPHA`` = 0.05 for a sweep
without seeding; a seeded sweep's look judges at its own share of it, ``cemlab.sweeps.look_levels``) and
holds each one-sided test to ``alpha / 2`` (Holm's step level where Holm applies); a choice among
``m`` candidates is tested at a further ``1 / m``.

**The interval shown decides** (``decision_bounds``): each end is the one-sided confidence bound
of the test that decides on that side, at the level that test was held to, the every-choice factor
included (for a tuned comparison: the smallest, over the choices that may be picked, of the largest
bound over the others). So a comparison is supported exactly when the claim's end of its interval
is beyond the tolerance, and contradicted exactly when the other end is; the interval's coverage is
``1 - alpha_low - alpha_high`` (``Bounds.level``: 97.5% at one-sided 1.25% each way). A negligible
verdict is the interval inside +-margin at the TOST level, an equivalence (TOST) claim the interval
inside +-tol; an exact sign test has no interval, and its row says what decided. ``t_interval``
at ``LEVEL`` (95%) is only the descriptive second mark (``Check.iv``), never the decision.

Verdict words:

- ``supported``: the claim's side of its tolerance (below, above, or inside +-tol by two one-sided
  tests);
- ``contradicted``: the other side;
- ``negligible``: a difference claim (tolerance 0) whose effect lies inside +-``margin``, the claim's
  smallest effect of interest, by two one-sided tests;
- ``inconclusive``: none of these, in particular one seed only or zero spread (``ZERO_SPREAD``);
- ``not enough runs``: no seed at which every compared cell has a usable run.

``judge`` and ``deciding_interval`` do all of this for one comparison from its per-seed log metrics
(what the ladder report and any other caller reuse); ``docs/verdicts.md`` is the method page.

scipy is imported inside the functions, so ``cemlab report`` refuses a bad sweep name without
loading it. They call ``scipy.special``'s distribution functions (tests/test_claims_stats.py holds
them to ``scipy.stats``): importing ``scipy.stats`` took 0.2-0.5 s of every report and every look.
"""
