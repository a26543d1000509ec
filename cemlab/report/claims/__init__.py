"""The claims and their verdicts: ``catalog`` (the claims bound to their rules), ``rules`` and
``recursion_rules`` (each claim's rule), ``pairing`` (the cells a comparison pairs, seed by seed),
``verdicts`` (a claim's verdict from its comparisons; what rules and plugins build with),
``verdict_tables`` and ``comparisons`` (the tables and the forest plot of the verdicts)."""
