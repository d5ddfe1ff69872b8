"""Everything kdtree does over SSH (fabric), and nothing else does: the host inventory,
strictly host-key-checked connections, content-hash sync into release directories, the
remote lock, the remote Python environment, the build/test steps, and running a `kdtree`
subcommand on a host with its output streamed back.

Where things live:
  inventory.py      HostConfig and the kdtree.toml / ~/.config/kdtree/hosts.toml loader
  hostkeys.py       known_hosts policies: refuse unknown and changed keys, or accept new ones
  connection.py     connect(): a fabric Connection, strict host keys on every hop
  connect_errors.py every connection failure as a sentence a person can act on
  channel.py        run a remote command: captured, or streamed line by line
  shell.py          quoting helpers (every remote path and argument goes through them)
  paths.py          a host's remote paths with `~` resolved against the remote $HOME
  manifest.py       which local files are synced, hashed, and diffed against a release
  release_tool.py   the stdlib-only helper that runs ON the remote (stage, switch, prune...)
  releases.py       the local side of release directories: state, stage, upload, switch
  transfer.py       tar streams over SSH exec channels, both ways
  lock.py           the per-host deploy lock (flock held by a dedicated channel)
  pyenv.py          preflight (Python >= 3.11, nvcc) and the remote venv / offline wheels
  steps.py          the remote build and test commands
  results.py        the local results/<host>/ folder, replaced only by a successful deploy
  deploy.py         deploy_host(): the whole pipeline for one host, as plain functions
  parallel.py       run a per-host function over a thread pool, failures collected per host
  output.py         '[host] line' printing and per-step logs
  probe.py          `kdtree hosts` checks (reachable, Python, nvcc, GPUs, arch)
  exec.py           stream_kdtree() / run_kdtree(): `kdtree ...` on a host, streamed back

`import remote` is cheap: the modules that need fabric/paramiko import them themselves, and
the CLI imports those modules inside its commands (the engine path never needs them).
"""
