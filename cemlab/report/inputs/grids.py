"""The sweep files as the report reads them: names, scales, what each feeds (figures, claims) and
their expanded grids, with the overrides a sweep ran with. ``cemlab.sweeps.sweepfile.load`` is imported inside
``SweepGrids`` so that ``cemlab report`` refuses a bad sweep name fast."""

from __future__ import annotations

from pathlib import Path


class SweepGrids:
    """The sweep files (``cemlab.sweeps.sweepfile.load``): names, scales, what each feeds (its figures and
    claims) and expanded grids (cached). ``overrides``: the ``key=value`` of ``cemlab sweep``, applied
    to every grid as the sweep applied them (a sweep they do not fit keeps its own grid), so that the
    report reads exactly the trials that ran."""

    def __init__(self, overrides: list[str] | None = None):
        from cemlab.sweeps.sweepfile import load as spec
        self._spec = spec
        self.overrides = list(overrides or [])
        self._cache: dict[tuple[str, str], list] = {}
        self._specs: dict[str, object] = {}

    def names(self) -> list[str]:
        return self._spec.list_sweeps()

    def add_file(self, sweep: str | Path) -> str:
        """``sweep`` as a name: a path to a ``.yaml`` sweep file is loaded and known by its file
        name from then on (a sweep run from a path gets its report like one in the sweeps folder)."""
        if Path(sweep).suffix not in (".yaml", ".yml"):
            return str(sweep)
        spec = self._spec.load_sweep(sweep)
        self._specs[spec.name] = spec
        return spec.name

    def loaded(self) -> set[str]:
        """The names of the sweep files loaded so far (those given by path among them)."""
        return set(self._specs)

    def scales(self) -> list[str]:
        return list(self._spec.load_scales())

    @property
    def default_scale(self) -> str:
        """The project's default scale, or the first defined one if the scales file lacks it."""
        scales = self.scales()
        return self._spec.DEFAULT_SCALE if self._spec.DEFAULT_SCALE in scales or not scales else scales[0]

    def trials(self, sweep: str, scale: str) -> list:
        """The grid; raises ``SweepError`` for an unknown sweep or scale."""
        key = (sweep, scale)
        if key not in self._cache:
            try:
                self._cache[key] = self.spec(sweep).expand(scale, overrides=self.overrides or None)
            except self._spec.SweepError:
                if not self.overrides:
                    raise
                self._cache[key] = self.spec(sweep).expand(scale)  # overrides that do not fit this sweep
        return self._cache[key]

    def spec(self, sweep: str):
        """The sweep file (``SweepSpec``); raises ``SweepError`` for an unknown or broken one."""
        if sweep not in self._specs:
            self._specs[sweep] = self._spec.load_sweep(sweep)
        return self._specs[sweep]

    def figure(self, sweep: str) -> str:
        """The sweep file's ``figure:`` label."""
        return self.spec(sweep).figure

    def claim_sweeps(self) -> dict[str, list[str]]:
        """Claim id -> the sweeps whose files list it; a sweep that lists the claim earlier in its
        ``claims:`` comes first (the claim's own sweep before those it compares with), then by name.
        A file that does not load lists nothing here (its own report fails naming it). The report
        reads each claim's sweeps from its entry (``Claim.sweeps``); tests/test_sweep_files.py
        checks that this, the files' view, agrees with it."""
        listed = []
        for name in self.names():
            try:
                claims = self.spec(name).claims
            except ValueError:  # SweepError
                continue
            listed += [(claims.index(cid), name, cid) for cid in claims]
        out: dict[str, list[str]] = {}
        for _, name, cid in sorted(listed):
            out.setdefault(cid, []).append(name)
        return out
