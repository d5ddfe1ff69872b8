"""The demo pair's training recipe (`kdtree train-demo`): a corpus of Python standard-library
source, a byte-level BPE tokenizer, a small DeepSeek-V3-architecture target trained with
transformers' DeepseekV3ForCausalLM, a DFlash drafter trained on the target's own hidden
states and greedy continuations, and the held-out evaluation with the reference engine.

Stages (each reads the previous one's files and can be re-run alone):
    corpus -> tokenizer -> target -> drafter -> eval
"""
