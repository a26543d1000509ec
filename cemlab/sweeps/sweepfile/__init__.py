"""Reading a sweep file: its schema and messages, the scales, config layers and axis templates, and the expansion into fully resolved trials (``load.load_sweep`` -> ``SweepSpec.expand``)."""
