"""The native build: `kdtree build` writes build.ninja for csrc/ and runs ninja (nvcc called
directly, no CMake). Modules: arch (targets), toolchain (nvcc, cuBLAS, g++, ninja), layout
(which source goes where), profiles, ninja_file (the generator), compdb (clangd), runner
(ninja with a progress display), driver (the whole build), native_tests (`kdtree test --native`).
"""
