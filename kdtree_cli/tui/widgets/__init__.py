"""The monitor's panels, one per file. Each draws from the stats model (`show(stats)`);
none reads a source or another panel."""
