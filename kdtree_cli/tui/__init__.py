"""`kdtree tui`: a textual live monitor of a DDTree run, fed only by metrics events
(python_engine/events.py; docs/events.md). Layout of this package:

    stats.py         the numbers (pure Python; also the JSON summary and the benchmark's)
    sources/         where events come from (file, replay, local run, SSH); post messages
    messages.py      the typed messages sources post
    widgets/         one panel per file; each draws from the stats model
    screens/help.py  the `?` screen
    app.py           the App and its factory `make_app`; app.tcss its layout
    drawing.py       bars, sparklines and number formats shared by the panels
    snapshot.py      the `s` key's SVG + JSON files
    launch.py        command-line choices -> source -> running app (also for `--tui` flags)

The ingest benchmark is a developer tool: python -m tools.bench_tui_ingest.

Importing this package imports nothing heavy; textual loads with app.py.
"""
