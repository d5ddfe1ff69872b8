/* kdtree native engine: the C API.
 *
 * One engine = one GPU (or one rank's part of a model split over several GPUs), one target model (DeepSeek-V3 / Kimi K2 architecture: MLA + MoE)
 * and, optionally, its DFlash drafter, with request slots whose caches are sized once at
 * create time. Python (python_engine/native/) parses config.json and the safetensors
 * headers and passes flat descriptions; the engine reads the tensor bytes from the files
 * itself.
 *
 * Every call returns a kd_status; on failure the engine's last-error text says what was
 * wrong and what to change (kd_engine_last_error). No call aborts the process. After a
 * KD_CUDA_ERROR the engine refuses further work (KD_BAD_STATE) and should be freed.
 * Calls on one engine must not overlap (the Python binding serialises them).
 *
 * Rows of every array are row-major. Logits and hidden states cross the API as float32
 * whatever the compute dtype.
 */
#ifndef KDTREE_ENGINE_H_
#define KDTREE_ENGINE_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KD_ENGINE_ABI 6        /* bumped whenever a struct below changes */
#define KD_NCCL_ID_BYTES 128   /* ncclUniqueId */
#define KD_MAX_WORLD 8         /* ranks of one split model (a simulated group's fixed arrays) */
#define KD_MAX_TARGET_LAYER_IDS 16
#define KD_MAX_STOP_IDS 16
#define KD_MAX_BATCH 256       /* request slots per engine */
#define KD_STAGES 5            /* draft, tree_build, verify, commit, host */

typedef struct kd_engine kd_engine;
typedef struct kd_sim_group kd_sim_group;

typedef enum kd_status {
  KD_OK = 0,
  KD_INVALID_ARGUMENT = 1, /* a bad argument: the message names it */
  KD_OVER_LIMIT = 2,       /* beyond what the engine was created for (slots, tokens, budget) */
  KD_LOAD_ERROR = 3,       /* a checkpoint file or tensor is missing, short or malformed */
  KD_OUT_OF_MEMORY = 4,    /* GPU or pinned host memory */
  KD_CUDA_ERROR = 5,       /* CUDA or cuBLAS failed; the engine is unusable afterwards */
  KD_BAD_STATE = 6,        /* not allowed now (an earlier CUDA error, an unknown request) */
  KD_INTERNAL = 7,         /* a bug: please report the message */
} kd_status;

/* Element type of a stored tensor, and the engine's compute type (F32 or BF16). KD_I32 is
 * for stored INT4 words (weight_packed) only. */
typedef enum kd_dtype { KD_F32 = 0, KD_BF16 = 1, KD_I32 = 2 } kd_dtype;

/* One tensor of the checkpoint: where its bytes lie. Target names are the DeepSeek-V3
 * names without Kimi's "language_model." prefix; drafter names carry "drafter.". */
typedef struct kd_tensor_entry {
  const char* name;
  const char* file;  /* path of the safetensors file */
  uint64_t offset;   /* absolute byte offset of the data in the file */
  uint64_t nbytes;
  int32_t dtype;     /* kd_dtype */
  int32_t ndim;      /* 1..4 */
  int64_t shape[4];
} kd_tensor_entry;

/* The target's config.json, normalised (python_engine/model/config.py). */
typedef struct kd_target_config {
  int32_t vocab_size, hidden_size, intermediate_size, moe_intermediate_size;
  int32_t num_layers, num_heads, q_lora_rank; /* q_lora_rank 0: q_proj straight from h */
  int32_t kv_lora_rank, qk_nope_dim, qk_rope_dim, v_head_dim;
  int32_t n_routed_experts, n_shared_experts, experts_per_token, n_group, topk_group;
  int32_t first_dense_layers, norm_topk_prob, rope_interleave, tie_word_embeddings;
  int32_t experts_int4; /* routed experts as compressed-tensors pack-quantized INT4, group 32
                           (weight_packed int32 [out, in/8] + weight_scale bf16 [out, in/32]) */
  float routed_scaling_factor, rms_norm_eps, latent_norm_eps; /* latent: q_a / kv_a norms */
  float softmax_scale;          /* 1/sqrt(qk_nope + qk_rope), times YaRN's mscale^2 */
  float rope_attention_factor;  /* YaRN's cos/sin scale (1 for default RoPE) */
  const float* rope_inv_freq;   /* [qk_rope_dim / 2], as transformers computes it */
} kd_target_config;

/* The DFlash drafter's config.json (python_engine/model/drafter_config.py). */
typedef struct kd_drafter_config {
  int32_t hidden_size, num_layers, num_heads, num_kv_heads, head_dim, intermediate_size;
  int32_t block_size, mask_token_id, n_target_layers;
  int32_t target_layer_ids[KD_MAX_TARGET_LAYER_IDS];
  float rms_norm_eps, input_embedding_scale, output_multiplier;
  float final_logit_softcapping; /* 0: none */
  float rope_attention_factor;
  const float* rope_inv_freq;    /* [head_dim / 2] (rotate-half RoPE) */
} kd_drafter_config;

typedef struct kd_engine_options {
  int32_t abi_version;     /* KD_ENGINE_ABI */
  int32_t dtype;           /* compute: KD_F32 (exactness checks) or KD_BF16 */
  int32_t device;          /* CUDA device ordinal */
  int32_t max_slots;       /* concurrent requests, 1..KD_MAX_BATCH */
  int32_t max_tokens;      /* prompt + generated tokens per request */
  int32_t max_budget;      /* DDTree node budget, 0..1024 */
  int32_t max_block_size;  /* drafter block, 1..33 (0: the drafter's own) */
  int32_t prefill_chunk;   /* prompt tokens per prefill forward (0: 256) */
  int32_t use_graphs;      /* capture each round shape in a CUDA graph */
  int32_t load_threads;    /* files read in parallel (0: 4) */
  /* Several GPUs (tensor parallel attention and dense MLPs, expert parallel routed experts,
   * lm_head split by vocabulary, drafter replicated): every rank creates an engine with its
   * rank and the same world_size and id, then makes the same calls in the same order. */
  int32_t world_size;      /* 0 or 1: the whole model on this GPU */
  int32_t rank;            /* 0..world_size-1 */
  int32_t comm;            /* kd_comm_kind */
  float collective_timeout_s; /* a collective (or a wait on one) longer than this fails the call (0: 300 s) */
  uint8_t nccl_id[KD_NCCL_ID_BYTES]; /* KD_COMM_NCCL: kd_nccl_unique_id of rank 0, the same on every rank */
  kd_sim_group* sim_group; /* KD_COMM_SIMULATED: the group every part was created in */
  int32_t overlap_collectives; /* 1: a forward of several slots runs as two halves, each half's
                                   all-reduce beside the other half's compute; 0 (default): in line
                                   (the halves re-read the weights: slower where measured) */
  int32_t load_format;     /* kd_load_format */
  uint64_t dummy_seed;     /* KD_LOAD_DUMMY: the weights' random seed */
  uint64_t memory_limit;   /* bytes this engine may allocate on the device (0: all it has); what
                              does not fit is refused before anything is allocated */
} kd_engine_options;

typedef enum kd_load_format {
  KD_LOAD_CHECKPOINT = 0, /* read the tensors of the table */
  KD_LOAD_DUMMY = 1,      /* no files: every planned weight made on the device from dummy_seed
                             (INT4 experts in the W4A16 layout, with scales), for timing and
                             memory; the table must be empty, and tokens from it mean nothing */
} kd_load_format;

typedef enum kd_comm_kind {
  KD_COMM_NONE = 0,      /* world_size 1 */
  KD_COMM_NCCL = 1,      /* one process per GPU, NCCL communicators (intra- and inter-host) */
  KD_COMM_SIMULATED = 2, /* every part in this process on one GPU, run one after another and
                            reduced in rank order: a check of the split against the whole model */
  /* KD_COMM_NONE with world_size > 1: one rank's share alone. The engine holds rank `rank`'s
     parts and its collectives do nothing (an all-gather leaves the other ranks' parts zero),
     so one GPU times and sizes what each of world_size GPUs computes in a round; the step
     report says the collectives did not run (collectives_run 0). Outputs mean nothing. */
} kd_comm_kind;

/* Memory decided at create time (bytes). */
typedef struct kd_memory_report {
  uint64_t weights, target_cache, drafter_cache, workspace, total;
  uint64_t device_total, device_free_before, device_free_after;
  uint64_t load_us; /* reading the checkpoint into GPU memory (or making dummy weights) */
  uint64_t target_weights, drafter_weights; /* weights = their sum */
  uint64_t limit;   /* what the engine planned within: memory_limit, or the device's free memory */
} kd_memory_report;

typedef void (*kd_progress_fn)(void* user, uint64_t done_bytes, uint64_t total_bytes);

int32_t kd_abi_version(void);
/* The device's memory now, as cudaMemGetInfo reports it (for memory checks). */
kd_status kd_device_memory(int32_t device, uint64_t* free_bytes, uint64_t* total_bytes);

/* Loads the checkpoint (drafter may be NULL: AR only). On failure *out stays NULL, nothing is
 * left allocated on the GPU, and `error` (if given) holds the message. `progress` (may be
 * NULL) is called from the calling thread while files load. */
kd_status kd_engine_create(const kd_target_config* target, const kd_drafter_config* drafter,
                           const kd_tensor_entry* tensors, int32_t n_tensors, const kd_engine_options* options,
                           kd_progress_fn progress, void* progress_user, kd_engine** out, char* error,
                           size_t error_len);
void kd_engine_free(kd_engine* engine); /* NULL is fine */
const char* kd_engine_last_error(const kd_engine* engine);

/* A fresh NCCL unique id for rank 0 to hand to every rank (NCCL is loaded on first use:
 * the nvidia-nccl-cu13 wheel or the system's libnccl.so.2, or $KDTREE_NCCL_LIBRARY). */
kd_status kd_nccl_unique_id(uint8_t* id, char* error, size_t error_len);
/* A group for KD_COMM_SIMULATED engines: world_size parts on one GPU, driven from one
 * thread per part (the group serialises them). Free it after every engine in it. */
kd_status kd_sim_group_create(int32_t world_size, kd_sim_group** out, char* error, size_t error_len);
void kd_sim_group_free(kd_sim_group* group);
kd_status kd_engine_memory(kd_engine* engine, kd_memory_report* report);

/* One weight of the engine's plan (this rank's part of it when split), as held on the device. */
typedef struct kd_weight_info {
  char name[160];
  int32_t ndim;
  int64_t shape[4];
  uint64_t bytes;
} kd_weight_info;
int32_t kd_engine_weight_count(kd_engine* engine); /* -1 for a null engine */
kd_status kd_engine_weight_info(kd_engine* engine, int32_t index, kd_weight_info* info);
/* The options the engine runs with (defaults filled in). */
kd_status kd_engine_options_get(kd_engine* engine, kd_engine_options* options);

/* ---- forwards (part 1: parity tests and custom loops) -------------------------------- */

/* Empty a slot's caches. */
kd_status kd_slot_reset(kd_engine* engine, int32_t slot);
kd_status kd_slot_lengths(kd_engine* engine, int32_t slot, int32_t* target_len, int32_t* drafter_len);

/* Prefill: run the prompt through the target (in chunks) at positions target_len.., commit
 * it, and (with a drafter) append its features to the drafter's context. last_logits [V]
 * (the last token's) and hidden [n, n_target_layers * hidden] may be NULL. */
kd_status kd_prefill(kd_engine* engine, int32_t slot, const int32_t* tokens, int32_t n, float* last_logits,
                     float* hidden);

/* T new tokens for each of `batch` consecutive slots first_slot.., written after each slot's
 * committed rows. vis [batch, T, vis_words]: bit j of row t (word j/32, bit j%32) = new
 * token j is visible to t (a tree's ancestor mask); NULL = causal. commit = 1 appends the
 * rows to the caches; 0 leaves them uncommitted (a verify: see kd_slot_keep).
 * logits [batch*T, V], hidden [batch*T, n_target_layers * hidden]: NULL to skip. */
kd_status kd_forward(kd_engine* engine, int32_t first_slot, int32_t batch, int32_t tokens_per_slot,
                     const int32_t* tokens, const int32_t* positions, const uint32_t* vis, int32_t vis_words,
                     int32_t commit, float* logits, float* hidden);

/* After an uncommitted forward of T rows: keep rows target_len + accepted[j] at
 * target_len + j (accepted[0] = 0, increasing), commit `count` rows. */
kd_status kd_slot_keep(kd_engine* engine, int32_t slot, const int32_t* accepted, int32_t count);

/* The drafter on `batch` consecutive slots: append ctx_count[b] context rows of features
 * (ctx_features [batch, max_ctx, n_target_layers * hidden], may be NULL when all counts are
 * 0), then draft the block [bonus[b], mask...] of block_size positions at position
 * drafter_len; logits [batch, block_size - 1, V]. */
kd_status kd_draft(kd_engine* engine, int32_t first_slot, int32_t batch, const float* ctx_features,
                   const int32_t* ctx_count, int32_t max_ctx, const int32_t* bonus, int32_t block_size,
                   float* logits);

/* ---- generation (part 2: the DDTree loop with continuous batching) -------------------- */

typedef struct kd_request {
  const int32_t* prompt;
  int32_t prompt_len;
  int32_t max_new_tokens;
  int32_t budget;       /* DDTree node budget, 0..max_budget */
  int32_t block_size;   /* 0: the drafter's; 2..max_block_size */
  int32_t ar;           /* 1: plain autoregressive decoding */
  float temperature;    /* 0: greedy */
  uint64_t seed;
  const int32_t* stop_ids;
  int32_t n_stop;
} kd_request;

typedef enum kd_request_state {
  KD_REQ_WAITING = 0,
  KD_REQ_RUNNING = 1,
  KD_REQ_DONE = 2,
  KD_REQ_CANCELLED = 3,
} kd_request_state;

typedef struct kd_request_info {
  int64_t id;
  int32_t state;        /* kd_request_state */
  int32_t slot;         /* -1 when not running */
  int32_t tokens;       /* generated so far */
  int32_t rounds;       /* target forwards after the first token */
  int64_t accepted;     /* sum of accepted path lengths (tau = accepted / rounds) */
  double prefill_s, decode_s;
} kd_request_info;

/* One request's part of a round. */
typedef struct kd_round_record {
  int64_t request;
  int32_t round;        /* index within the request */
  int32_t accept_len, tree_size, tree_depth, tokens, emitted, done;
} kd_round_record;

typedef struct kd_step_report {
  int32_t rounds;       /* target forwards run (0: nothing to do) */
  int32_t batch;        /* slots in the forward */
  int32_t n_records;
  kd_round_record records[KD_MAX_BATCH];
  float stage_us[KD_STAGES]; /* draft, tree_build, verify, commit (CUDA events), host */
  int32_t admitted, finished, waiting, running;
  int32_t graph_replayed; /* 1 when the round ran as a captured CUDA graph */
  int32_t sampled_slot;   /* slot whose tree is in sample_* (-1: none) */
  int64_t sample_request; /* its request id */
  int32_t sample_n;       /* its node count */
  int32_t sample_parent[1025], sample_token[1025]; /* the sampled tree (root first) */
  int32_t sample_accepted[33];
  int32_t sample_accept_len;
  int32_t collectives;    /* collectives in the round (0 on one GPU) */
  float collective_us;    /* their summed time (CUDA events), inside draft and verify */
  int32_t collectives_run; /* 0: a rank share (KD_COMM_NONE, world_size > 1): counted, not run
                              nor timed (collective_us is then meaningless, never 0 us) */
} kd_step_report;

kd_status kd_submit(kd_engine* engine, const kd_request* request, int64_t* id);
kd_status kd_cancel(kd_engine* engine, int64_t id);
/* Admit waiting requests into free slots (prefilling them), then run one round (DDTree for
 * DDTree requests, one AR step for AR requests). want_tree = 1 copies one request's tree
 * into the report (costs a device-to-host copy). */
kd_status kd_step(kd_engine* engine, int32_t want_tree, kd_step_report* report);
kd_status kd_request_get(kd_engine* engine, int64_t id, kd_request_info* info, int32_t* tokens, int32_t capacity);
/* Forget a finished or cancelled request. */
kd_status kd_release(kd_engine* engine, int64_t id);

/* Philox4x32-10 of the sampler, for its known-answer test. */
void kd_philox4x32_10(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]);

#ifdef __cplusplus
}
#endif

#endif /* KDTREE_ENGINE_H_ */
