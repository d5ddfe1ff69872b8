"""The native CUDA engine's Python side (no torch): the ctypes binding of
csrc/engine/kdtree_engine.h, the checkpoint tensor table the engine loads from, and the
NativeEngine wrapper used by `kdtree run --engine native` and `kdtree demo`."""
