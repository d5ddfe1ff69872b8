"""Where the monitor's events come from. Each source reads lines in its own threads and
posts typed messages (kdtree_cli.tui.messages) to the app; base.py holds what they share.

    follow FILE                  file_follow.FollowSource   (tail -F)
    replay FILE --speed X        file_replay.ReplaySource
    --run -- ARGS                local_run.LocalRunSource   (kdtree run ARGS --metrics -)
    --host H -- ARGS             ssh_host.HostSource        (remote.detached: a detached run, tailed)
"""
