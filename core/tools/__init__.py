"""The commands beyond a run: check, contract, bench, export."""
