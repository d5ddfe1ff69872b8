"""The models of the torch reference engine: the DeepSeek-V3 / Kimi target in MLA absorbed
form (config, checkpoint loading, latent cache, forward) and the DFlash drafter."""
