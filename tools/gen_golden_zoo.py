"""Fixtures of the hybrid-family zoo for tools/gen_golden.py: their definitions.

Bamba, Nemotron-H, Falcon-H1, GraniteMoeHybrid, Zamba and Zamba2, LFM2 and LFM2-MoE,
RecurrentGemma, Qwen3.5 and Qwen3.5-MoE, Qwen3-Next, MiniMax, OLMo Hybrid, Jamba with
experts and Mamba-2 with time_step_limit, each a tiny model of its transformers class.
This module holds ZOO_FIXTURES, the table below; tools/zoo_make.py makes and checks each
fixture (gen_golden.py runs every fixture in its own worker process).
"""

# ---------------------------------------------------------------------------
# fixture definitions
# ---------------------------------------------------------------------------
#
# name          fixture folder
# model_cls     transformers class (looked up by name: a missing class fails the fixture)
# config_cls    its config class
# config        keyword arguments of the config (bos/eos/pad are set to 0 as for the
#               other fixtures)
# extra_keys    config keys that are not fields of config_cls but that the modeling
#               code reads with getattr (they are accepted, and must read back)
# expect        values that a key must read back as when transformers resolves it
#               ("auto" head sizes) -- every other key must read back unchanged
# layers        expected "child:Class" signature of every decoder layer (non-norm
#               children, sorted)
# probes        config probes: (label, {key: value}) rebuilt with the same weights
# info_probes   labels of probes that are informational (no minimum effect)
# dt_init       range of softplus(dt_bias) the Mamba-2 mixers are initialised with
# decode_clamp  True where transformers' single-token (generate) path of the Mamba-2
#               mixer does NOT apply the dt clamp that its chunked (full forward) path
#               applies: generate's scores then differ from the full forward by
#               design; the fixture requires that both give the same greedy tokens
# all_experts   every expert of every MoE layer must be picked by the fixture's tokens
#               (part of the seed search)
# clamp_bounds  which dt bounds must be hit by the fixture ("lo", "hi")
# init          re-initialisation overrides applied after reinit_zoo_'s rules, by name
#               suffix: ("normal", mean, std) or ("scale", factor). Used where tied
#               embeddings that are large against the blocks' outputs make the greedy
#               output repeat one token: the embedding is made smaller, the final norm
#               (and so the logits) larger, the residual writers larger
# max_kb        the fixture's size on disk may reach this (default 600 KB): a long
#               prompt's rows of logits take more

# Qwen3.5's text model, as qwen3_5_tiny and qwen3_5_long have it
QWEN3_5_CONFIG = dict(
    vocab_size=320, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
    layer_types=["linear_attention", "full_attention", "linear_attention"],
    num_attention_heads=4, num_key_value_heads=2, head_dim=8,
    linear_conv_kernel_dim=4, linear_key_head_dim=8, linear_value_head_dim=6,
    linear_num_key_heads=2, linear_num_value_heads=4,
    rms_norm_eps=1e-6, tie_word_embeddings=False,
    rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                     "partial_rotary_factor": 0.5},
)
QWEN3_5_LAYERS = ["linear_attn:Qwen3_5GatedDeltaNet mlp:Qwen3_5MLP",
                  "mlp:Qwen3_5MLP self_attn:Qwen3_5Attention",
                  "linear_attn:Qwen3_5GatedDeltaNet mlp:Qwen3_5MLP"]

ZOO_FIXTURES = [
    # Bamba: Mamba-2 layers (n_groups 2, full-width gated norm) + GQA attention with
    # partial (0.5, forced by BambaConfig) NeoX RoPE at attn_layer_indices; SwiGLU MLP
    # in every layer; chunk_size 4 so the full forward crosses SSD chunks.
    dict(
        name="bamba_tiny",
        model_cls="BambaForCausalLM",
        config_cls="BambaConfig",
        seed=1101,
        prompt_len=9,
        new_tokens=8,
        config=dict(
            vocab_size=256, hidden_size=48, intermediate_size=48, num_hidden_layers=4,
            attn_layer_indices=[1, 3],
            num_attention_heads=4, num_key_value_heads=2,
            mamba_n_heads=6, mamba_d_head="auto", mamba_n_groups=2, mamba_d_state=12,
            mamba_d_conv=4, mamba_expand=2, mamba_chunk_size=4,
            mamba_conv_bias=True, mamba_proj_bias=False,
            rms_norm_eps=1e-5, tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 1000.0},
        ),
        expect=dict(mamba_d_head=16),
        layers=["feed_forward:BambaMLP mamba:BambaMixer",
                "feed_forward:BambaMLP self_attn:BambaAttention"] * 2,
        probes=[
            ("rope_theta 1000 -> 100000", {"rope_parameters": {
                "rope_type": "default", "rope_theta": 100000.0, "partial_rotary_factor": 0.5}}),
            ("partial_rotary_factor 0.5 -> 1.0", {"rope_parameters": {
                "rope_type": "default", "rope_theta": 1000.0, "partial_rotary_factor": 1.0}}),
        ],
    ),
    # Nemotron-H: a per-layer type list with all four kinds; Mamba-2 with the grouped
    # gated norm (n_groups 2) and the chunk-path dt floor time_step_min; attention
    # without positional embedding and with head_dim != hidden/heads; squared-ReLU MLP;
    # sigmoid-scored MoE with a shared expert, score-correction bias, top-2 of 4
    # normalised and scaled by routed_scaling_factor.
    dict(
        name="nemotron_h_tiny",
        model_cls="NemotronHForCausalLM",
        config_cls="NemotronHConfig",
        seed=1102,
        prompt_len=9,
        new_tokens=7,
        config=dict(
            vocab_size=256, hidden_size=48, tie_word_embeddings=False,
            layers_block_type=["linear_attention", "moe", "full_attention", "mlp",
                               "linear_attention"],
            num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            intermediate_size=96, mlp_hidden_act="relu2", mlp_bias=False,
            ssm_state_size=12, mamba_num_heads=6, mamba_head_dim=16, mamba_hidden_act="silu",
            n_groups=2, conv_kernel=4, chunk_size=4, use_conv_bias=True, use_bias=False,
            time_step_min=0.01,
            n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
            moe_shared_expert_intermediate_size=48, routed_scaling_factor=1.5,
            n_group=1, topk_group=1, norm_topk_prob=True,
            layer_norm_epsilon=1e-5, use_mamba_kernels=False,
        ),
        layers=["mixer:NemotronHMamba2Mixer", "mixer:NemotronHMoE", "mixer:NemotronHAttention",
                "mixer:NemotronHMLP", "mixer:NemotronHMamba2Mixer"],
        probes=[
            ("time_step_min 0.01 -> 1e-9 (no dt floor)", {"time_step_min": 1e-9}),
            ("routed_scaling_factor 1.5 -> 1", {"routed_scaling_factor": 1.0}),
            ("norm_topk_prob -> False", {"norm_topk_prob": False}),
        ],
        decode_clamp=True,
        clamp_bounds=("lo",),
    ),
    # Falcon-H1, three variants of the SSM output path: no gated norm (y * silu(z));
    # gated grouped norm applied after the gate (mamba_norm_before_gate False); and
    # before it (the config default True). All: attention and Mamba-2 in parallel in
    # every layer, every muP multiplier != 1, head_dim != hidden/heads (read with
    # getattr), mamba_d_ssm != mamba_expand * hidden.
    dict(
        name="falcon_h1_tiny",
        model_cls="FalconH1ForCausalLM",
        config_cls="FalconH1Config",
        seed=1103,
        prompt_len=8,
        new_tokens=8,
        config=dict(
            vocab_size=320, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
            num_attention_heads=4, num_key_value_heads=2, head_dim=12,
            mamba_d_ssm=48, mamba_n_heads=4, mamba_d_head="auto", mamba_n_groups=2,
            mamba_d_state=8, mamba_d_conv=3, mamba_expand=2, mamba_chunk_size=4,
            mamba_conv_bias=True, mamba_proj_bias=False, mamba_rms_norm=False,
            projectors_bias=False, rms_norm_eps=1e-5, tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 1000.0},
            embedding_multiplier=1.7, lm_head_multiplier=1.6, key_multiplier=0.7,
            attention_in_multiplier=1.2, attention_out_multiplier=0.9,
            ssm_in_multiplier=1.3, ssm_out_multiplier=0.75,
            ssm_multipliers=[0.9, 1.1, 0.8, 1.25, 0.7], mlp_multipliers=[0.8, 1.3],
        ),
        extra_keys=("head_dim",),
        expect=dict(mamba_d_head=12),
        layers=["feed_forward:FalconH1MLP mamba:FalconH1Mixer self_attn:FalconH1Attention"] * 3,
        probes="falcon",
    ),
    dict(
        name="falcon_h1_rmsnorm",
        model_cls="FalconH1ForCausalLM",
        config_cls="FalconH1Config",
        seed=1104,
        prompt_len=9,
        new_tokens=7,
        config=dict(
            vocab_size=320, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
            num_attention_heads=4, num_key_value_heads=2, head_dim=12,
            mamba_d_ssm=48, mamba_n_heads=4, mamba_d_head="auto", mamba_n_groups=2,
            mamba_d_state=8, mamba_d_conv=3, mamba_expand=2, mamba_chunk_size=4,
            mamba_conv_bias=True, mamba_proj_bias=False,
            mamba_rms_norm=True, mamba_norm_before_gate=False,
            projectors_bias=False, rms_norm_eps=1e-5, tie_word_embeddings=True,
            rope_parameters={"rope_type": "default", "rope_theta": 1000.0},
            embedding_multiplier=1.7, lm_head_multiplier=1.6, key_multiplier=0.7,
            attention_in_multiplier=1.2, attention_out_multiplier=0.9,
            ssm_in_multiplier=1.3, ssm_out_multiplier=0.75,
            ssm_multipliers=[0.9, 1.1, 0.8, 1.25, 0.7], mlp_multipliers=[0.8, 1.3],
        ),
        extra_keys=("head_dim",),
        expect=dict(mamba_d_head=12),
        layers=["feed_forward:FalconH1MLP mamba:FalconH1Mixer self_attn:FalconH1Attention"] * 3,
        probes="falcon",
    ),
    dict(
        name="falcon_h1_normfirst",
        model_cls="FalconH1ForCausalLM",
        config_cls="FalconH1Config",
        seed=1105,
        prompt_len=8,
        new_tokens=8,
        config=dict(
            vocab_size=320, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
            num_attention_heads=4, num_key_value_heads=2, head_dim=12,
            mamba_d_ssm=48, mamba_n_heads=4, mamba_d_head="auto", mamba_n_groups=2,
            mamba_d_state=8, mamba_d_conv=3, mamba_expand=2, mamba_chunk_size=4,
            mamba_conv_bias=True, mamba_proj_bias=False,
            mamba_rms_norm=True, mamba_norm_before_gate=True,
            projectors_bias=False, rms_norm_eps=1e-5, tie_word_embeddings=True,
            rope_parameters={"rope_type": "default", "rope_theta": 1000.0},
            embedding_multiplier=1.7, lm_head_multiplier=1.6, key_multiplier=0.7,
            attention_in_multiplier=1.2, attention_out_multiplier=0.9,
            ssm_in_multiplier=1.3, ssm_out_multiplier=0.75,
            ssm_multipliers=[0.9, 1.1, 0.8, 1.25, 0.7], mlp_multipliers=[0.8, 1.3],
        ),
        extra_keys=("head_dim",),
        expect=dict(mamba_d_head=12),
        layers=["feed_forward:FalconH1MLP mamba:FalconH1Mixer self_attn:FalconH1Attention"] * 3,
        probes="falcon",
    ),
    # GraniteMoeHybrid, dense (num_local_experts 0: only the shared MLP) with RoPE, and
    # with 4 experts (top-2, softmax over the top-k logits) and no positional embedding.
    dict(
        name="granitemoe_hybrid_dense",
        model_cls="GraniteMoeHybridForCausalLM",
        config_cls="GraniteMoeHybridConfig",
        seed=1106,
        prompt_len=9,
        new_tokens=8,
        config=dict(
            vocab_size=320, hidden_size=32, intermediate_size=24, num_hidden_layers=4,
            layer_types=["linear_attention", "full_attention", "linear_attention",
                         "linear_attention"],
            num_attention_heads=4, num_key_value_heads=2,
            num_local_experts=0, num_experts_per_tok=2, shared_intermediate_size=48,
            position_embedding_type="rope",
            rope_parameters={"rope_type": "default", "rope_theta": 1000.0},
            mamba_n_heads=4, mamba_d_head="auto", mamba_n_groups=1, mamba_d_state=16,
            mamba_d_conv=4, mamba_expand=2, mamba_chunk_size=4,
            mamba_conv_bias=True, mamba_proj_bias=False,
            embedding_multiplier=4.0, logits_scaling=0.6, residual_multiplier=0.6,
            attention_multiplier=0.25, rms_norm_eps=1e-6, tie_word_embeddings=True,
        ),
        expect=dict(mamba_d_head=16),
        layers=["mamba:GraniteMoeHybridMambaLayer shared_mlp:GraniteMoeHybridMLP",
                "self_attn:GraniteMoeHybridAttention shared_mlp:GraniteMoeHybridMLP",
                "mamba:GraniteMoeHybridMambaLayer shared_mlp:GraniteMoeHybridMLP",
                "mamba:GraniteMoeHybridMambaLayer shared_mlp:GraniteMoeHybridMLP"],
        probes="granite",
        init={"embed_tokens.weight": ("normal", 0.0, 0.1), "model.norm.weight": ("normal", 2.0, 0.1)},
    ),
    dict(
        name="granitemoe_hybrid_moe",
        model_cls="GraniteMoeHybridForCausalLM",
        config_cls="GraniteMoeHybridConfig",
        seed=1107,
        prompt_len=9,
        new_tokens=8,
        config=dict(
            vocab_size=320, hidden_size=32, intermediate_size=24, num_hidden_layers=3,
            layer_types=["linear_attention", "full_attention", "linear_attention"],
            num_attention_heads=4, num_key_value_heads=2,
            num_local_experts=4, num_experts_per_tok=2, shared_intermediate_size=48,
            position_embedding_type=None,
            mamba_n_heads=4, mamba_d_head="auto", mamba_n_groups=1, mamba_d_state=16,
            mamba_d_conv=4, mamba_expand=2, mamba_chunk_size=4,
            mamba_conv_bias=True, mamba_proj_bias=False,
            embedding_multiplier=4.0, logits_scaling=0.6, residual_multiplier=0.6,
            attention_multiplier=0.25, rms_norm_eps=1e-6, tie_word_embeddings=True,
        ),
        expect=dict(mamba_d_head=16),
        layers=["block_sparse_moe:GraniteMoeHybridMoE mamba:GraniteMoeHybridMambaLayer "
                "shared_mlp:GraniteMoeHybridMLP",
                "block_sparse_moe:GraniteMoeHybridMoE self_attn:GraniteMoeHybridAttention "
                "shared_mlp:GraniteMoeHybridMLP",
                "block_sparse_moe:GraniteMoeHybridMoE mamba:GraniteMoeHybridMambaLayer "
                "shared_mlp:GraniteMoeHybridMLP"],
        probes="granite",
        init={"embed_tokens.weight": ("normal", 0.0, 0.1), "model.norm.weight": ("normal", 2.0, 0.1)},
        all_experts=True,
    ),
    # Zamba2: two shared attention+MLP blocks (num_mem_blocks 2) used at three hybrid
    # layers (block 0 at hybrid uses 0 and 2, block 1 at use 1), per-use LoRA adapters
    # on q/k/v and on the MLP's gate_up, input concatenated with the embeddings, RoPE
    # in the shared attention; Mamba-2 with the grouped gated norm and the chunk-path
    # dt floor time_step_min. num_key_value_heads = num_attention_heads: the k/v
    # adapters are 2*hidden wide, so they only fit without GQA.
    dict(
        name="zamba2_tiny",
        model_cls="Zamba2ForCausalLM",
        config_cls="Zamba2Config",
        seed=1108,
        prompt_len=9,
        new_tokens=7,
        config=dict(
            vocab_size=256, hidden_size=32, num_hidden_layers=5,
            layers_block_type=["linear_attention", "hybrid", "linear_attention", "hybrid",
                               "hybrid"],
            mamba_d_state=8, mamba_d_conv=4, mamba_expand=2, mamba_ngroups=2,
            n_mamba_heads=4, chunk_size=4, use_conv_bias=True, add_bias_linear=False,
            time_step_min=0.01,
            intermediate_size=48, hidden_act="gelu",
            num_attention_heads=4, num_key_value_heads=4,
            num_mem_blocks=2, use_shared_attention_adapter=True, adapter_rank=4,
            use_mem_rope=True, rope_parameters={"rope_type": "default", "rope_theta": 1000.0},
            rms_norm_eps=1e-5, tie_word_embeddings=True, use_mamba_kernels=False,
        ),
        layers=["mamba:Zamba2MambaMixer",
                "linear:Linear mamba_decoder:Zamba2MambaDecoderLayer "
                "shared_transformer:Zamba2AttentionDecoderLayer",
                "mamba:Zamba2MambaMixer",
                "linear:Linear mamba_decoder:Zamba2MambaDecoderLayer "
                "shared_transformer:Zamba2AttentionDecoderLayer",
                "linear:Linear mamba_decoder:Zamba2MambaDecoderLayer "
                "shared_transformer:Zamba2AttentionDecoderLayer"],
        probes=[
            ("time_step_min 0.01 -> 1e-9 (no dt floor)", {"time_step_min": 1e-9}),
            ("use_mem_rope -> False", {"use_mem_rope": False}),
        ],
        decode_clamp=True,
        clamp_bounds=("lo",),
        shared_blocks=[0, 1, 0],
    ),
    # LFM2: gated short convolutions (B*x, depthwise causal conv of width conv_L_cache,
    # C*.) with biases, GQA attention with per-head QK RMSNorm and RoPE (default theta
    # 1e6); SwiGLU MLP whose width comes from block_auto_adjust_ff_dim:
    # int(2*100/3) = 66 -> multiple of 16 -> 80.
    dict(
        name="lfm2_tiny",
        model_cls="Lfm2ForCausalLM",
        config_cls="Lfm2Config",
        seed=1109,
        prompt_len=9,
        new_tokens=8,
        config=dict(
            vocab_size=320, hidden_size=32, intermediate_size=100, num_hidden_layers=5,
            layer_types=["conv", "conv", "full_attention", "conv", "full_attention"],
            num_attention_heads=4, num_key_value_heads=2,
            conv_bias=True, conv_L_cache=3,
            block_auto_adjust_ff_dim=True, block_ffn_dim_multiplier=1.0, block_multiple_of=16,
            norm_eps=1e-5, tie_word_embeddings=True,
        ),
        layers=["conv:Lfm2ShortConv feed_forward:Lfm2MLP"] * 2
        + ["feed_forward:Lfm2MLP self_attn:Lfm2Attention", "conv:Lfm2ShortConv feed_forward:Lfm2MLP",
           "feed_forward:Lfm2MLP self_attn:Lfm2Attention"],
        probes=[
            ("rope_theta 1e6 -> 1e3", {"rope_parameters": {"rope_type": "default", "rope_theta": 1000.0}}),
        ],
        mlp_width=80,
    ),
    # RecurrentGemma: RG-LRU recurrent blocks (lru_width != hidden) and local attention
    # with a window of 5 (< prompt 9 + 8 generated), MQA-style GQA (4 heads, 1 kv head),
    # partial rotary 0.5; GeGLU (tanh) MLP of width intermediate_size/2; (1+w) RMSNorms;
    # embeddings times sqrt(48) rounded to bf16 (6.9375); logits soft-capped at 4.
    dict(
        name="recurrent_gemma_tiny",
        model_cls="RecurrentGemmaForCausalLM",
        config_cls="RecurrentGemmaConfig",
        seed=1110,
        prompt_len=9,
        new_tokens=8,
        config=dict(
            vocab_size=256, hidden_size=48, intermediate_size=96, num_hidden_layers=4,
            num_attention_heads=4, num_key_value_heads=1, lru_width=64,
            attention_window_size=5, conv1d_width=4, logits_soft_cap=4.0,
            block_types=["recurrent", "recurrent", "attention"],
            hidden_activation="gelu_pytorch_tanh", rms_norm_eps=1e-6,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            tie_word_embeddings=True,
        ),
        layers=["mlp_block:RecurrentGemmaMlp temporal_block:RecurrentGemmaRecurrentBlock"] * 2
        + ["mlp_block:RecurrentGemmaMlp temporal_block:RecurrentGemmaAttention",
           "mlp_block:RecurrentGemmaMlp temporal_block:RecurrentGemmaRecurrentBlock"],
        probes=[
            ("logits_soft_cap 4 -> 1e4 (no cap)", {"logits_soft_cap": 10000.0}),
            ("attention_window_size 5 -> 4096 (no window)", {"attention_window_size": 4096}),
            ("partial_rotary_factor 0.5 -> 1.0", {"rope_parameters": {
                "rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 1.0}}),
        ],
        normalizer_probe=True,
        init={"embed_tokens.weight": ("normal", 0.0, 0.12), "final_norm.weight": ("normal", 1.0, 0.1),
              "linear_out.weight": ("scale", 2.0), "o_proj.weight": ("scale", 2.0),
              "down_proj.weight": ("scale", 2.0)},
    ),
    # Qwen3.5 (text): Gated DeltaNet layers (the delta rule, 4 value heads over 2 key
    # heads, l2-normalised q and k, a decay a head, a gated RMSNorm of the output) and
    # a gated attention layer (q_proj gives each head's query and its output gate,
    # (1+w) q/k norms, partial rotary 0.5); SwiGLU MLP in every layer; (1+w) RMSNorms.
    dict(
        name="qwen3_5_tiny",
        model_cls="Qwen3_5ForCausalLM",
        config_cls="Qwen3_5TextConfig",
        seed=1121,
        prompt_len=9,
        new_tokens=8,
        config=QWEN3_5_CONFIG,
        layers=QWEN3_5_LAYERS,
        probes=[("partial_rotary_factor 0.5 -> 1.0", {"rope_parameters": {
            "rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 1.0}})],
    ),
    # Qwen3.5 again, with a prompt of 300 tokens: prefill crosses many chunks of the
    # chunked delta rule at any chunk size (7, 64, the default).
    dict(
        name="qwen3_5_long",
        model_cls="Qwen3_5ForCausalLM",
        config_cls="Qwen3_5TextConfig",
        seed=1131,
        prompt_len=300,
        new_tokens=8,
        max_kb=640,  # 307 rows of logits: 384 KB
        config=QWEN3_5_CONFIG,
        layers=QWEN3_5_LAYERS,
        probes=[],
    ),
    # Qwen3-Next: Qwen3.5's layers with the DeltaNet projections fused per key head
    # (in_proj_qkvz: each key head's q, k, then its value heads' v and z; in_proj_ba
    # likewise), and a sparse MoE (softmax router, top-2 of 4 renormalised, SwiGLU
    # experts, a shared expert times sigmoid of its gate) in every layer but
    # mlp_only_layers (layer 2: a dense SwiGLU MLP).
    dict(
        name="qwen3_next_tiny",
        model_cls="Qwen3NextForCausalLM",
        config_cls="Qwen3NextConfig",
        seed=1122,
        prompt_len=9,
        new_tokens=8,
        config=dict(
            vocab_size=320, hidden_size=32, intermediate_size=48, num_hidden_layers=4,
            layer_types=["linear_attention", "full_attention", "linear_attention", "linear_attention"],
            num_attention_heads=4, num_key_value_heads=2, head_dim=8,
            linear_conv_kernel_dim=4, linear_key_head_dim=8, linear_value_head_dim=6,
            linear_num_key_heads=2, linear_num_value_heads=4,
            num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
            shared_expert_intermediate_size=24, decoder_sparse_step=1, mlp_only_layers=[2],
            norm_topk_prob=True, rms_norm_eps=1e-6, tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                             "partial_rotary_factor": 0.5},
        ),
        layers=["linear_attn:Qwen3NextGatedDeltaNet mlp:Qwen3NextSparseMoeBlock",
                "mlp:Qwen3NextSparseMoeBlock self_attn:Qwen3NextAttention",
                "linear_attn:Qwen3NextGatedDeltaNet mlp:Qwen3NextMLP",
                "linear_attn:Qwen3NextGatedDeltaNet mlp:Qwen3NextSparseMoeBlock"],
        probes=[("num_experts_per_tok 2 -> 1", {"num_experts_per_tok": 1}),
                ("norm_topk_prob -> false", {"norm_topk_prob": False})],
        all_experts=True,
    ),
    # Qwen3.5-MoE (text): Qwen3.5's layers (unfused DeltaNet projections, gated
    # attention) with a sparse MoE in every layer: a softmax router over 4 experts, the
    # top 2 always renormalised to sum 1 (the config has no norm_topk_prob), SwiGLU
    # experts, a shared SwiGLU expert times sigmoid of its gate.
    dict(
        name="qwen3_5_moe_tiny",
        model_cls="Qwen3_5MoeForCausalLM",
        config_cls="Qwen3_5MoeTextConfig",
        seed=1123,
        prompt_len=9,
        new_tokens=8,
        config=dict(
            vocab_size=320, hidden_size=32, num_hidden_layers=3,
            layer_types=["linear_attention", "full_attention", "linear_attention"],
            num_attention_heads=4, num_key_value_heads=2, head_dim=8,
            linear_conv_kernel_dim=4, linear_key_head_dim=8, linear_value_head_dim=6,
            linear_num_key_heads=2, linear_num_value_heads=4,
            num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
            shared_expert_intermediate_size=24,
            rms_norm_eps=1e-6, tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                             "partial_rotary_factor": 0.5},
        ),
        layers=["linear_attn:Qwen3_5MoeGatedDeltaNet mlp:Qwen3_5MoeSparseMoeBlock",
                "mlp:Qwen3_5MoeSparseMoeBlock self_attn:Qwen3_5MoeAttention",
                "linear_attn:Qwen3_5MoeGatedDeltaNet mlp:Qwen3_5MoeSparseMoeBlock"],
        probes=[("num_experts_per_tok 2 -> 1", {"num_experts_per_tok": 1}),
                ("partial_rotary_factor 0.5 -> 1.0", {"rope_parameters": {
                    "rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 1.0}})],
        all_experts=True,
    ),
    # LFM2-MoE: LFM2's gated short convolutions and QK-normed GQA attention; a dense
    # SwiGLU MLP of intermediate_size in the first num_dense_layers layers (no
    # auto-adjusted width), then a sparse MoE: sigmoid router scores, the top 2 of 4
    # chosen on score + expert_bias (a saved buffer), weighted by the scores without the
    # bias, renormalised (sum + 1e-6) and times routed_scaling_factor.
    dict(
        name="lfm2_moe_tiny",
        model_cls="Lfm2MoeForCausalLM",
        config_cls="Lfm2MoeConfig",
        seed=1124,
        prompt_len=9,
        new_tokens=8,
        config=dict(
            vocab_size=320, hidden_size=32, intermediate_size=48, moe_intermediate_size=16,
            num_hidden_layers=5,
            layer_types=["conv", "conv", "full_attention", "conv", "full_attention"],
            num_attention_heads=4, num_key_value_heads=2,
            conv_bias=True, conv_L_cache=3, num_dense_layers=1,
            num_experts=4, num_experts_per_tok=2, use_expert_bias=True,
            routed_scaling_factor=1.5, norm_topk_prob=True,
            norm_eps=1e-5, tie_word_embeddings=True,
        ),
        layers=["conv:Lfm2MoeShortConv feed_forward:Lfm2MoeMLP",
                "conv:Lfm2MoeShortConv feed_forward:Lfm2MoeSparseMoeBlock",
                "feed_forward:Lfm2MoeSparseMoeBlock self_attn:Lfm2MoeAttention",
                "conv:Lfm2MoeShortConv feed_forward:Lfm2MoeSparseMoeBlock",
                "feed_forward:Lfm2MoeSparseMoeBlock self_attn:Lfm2MoeAttention"],
        probes=[("routed_scaling_factor 1.5 -> 1", {"routed_scaling_factor": 1.0}),
                ("norm_topk_prob -> false", {"norm_topk_prob": False}),
                ("num_experts_per_tok 2 -> 1", {"num_experts_per_tok": 1})],
        all_experts=True,
    ),
    # Zamba (v1): Mamba-1 mixers split into n_mamba_heads heads (per-head x_proj and
    # dt_proj, in_proj's x and gate interleaved channel by channel); one shared
    # attention+MLP block (input: the hidden state concatenated with the embeddings,
    # head_dim 2*hidden/heads, scores scaled by (head_dim/2)^-0.5, no RoPE, GQA), used
    # at the hybrid layers 2 and 4 and followed there by a per-layer linear whose output
    # is added to the Mamba layer's input. Hybrid layers: the first three layers are
    # mamba, mamba, hybrid, then layer 3 + j is hybrid where j % attn_layer_period ==
    # attn_layer_offset.
    dict(
        name="zamba_tiny",
        model_cls="ZambaForCausalLM",
        config_cls="ZambaConfig",
        seed=1125,
        prompt_len=9,
        new_tokens=8,
        config=dict(
            vocab_size=256, hidden_size=32, intermediate_size=48, num_hidden_layers=6,
            attn_layer_period=2, attn_layer_offset=1,
            num_attention_heads=4, num_key_value_heads=2, n_mamba_heads=2,
            hidden_act="gelu", hidden_mamba_act="silu",
            mamba_d_state=8, mamba_d_conv=4, mamba_expand=2, mamba_dt_rank="auto",
            mamba_conv_bias=True, mamba_proj_bias=False,
            rms_norm_eps=1e-5, tie_word_embeddings=True, use_mamba_kernels=False,
        ),
        expect=dict(mamba_dt_rank=2),
        layers=["mamba:ZambaMambaMixer"] * 2
        + ["linear:Linear mamba_decoder:ZambaMambaDecoderLayer shared_transf:ZambaAttentionDecoderLayer",
           "mamba:ZambaMambaMixer",
           "linear:Linear mamba_decoder:ZambaMambaDecoderLayer shared_transf:ZambaAttentionDecoderLayer",
           "mamba:ZambaMambaMixer"],
    ),
    # MiniMax: lightning attention layers (silu of one per-head-interleaved qkv
    # projection, a linear attention with a fixed decay a head, exp(-slope), the
    # slopes 2^(-8(h+1)/heads) scaled by 1 - i/(layers-1) + 1e-5, so the last layer
    # barely decays; an RMSNorm over all heads (eps 1e-6) and a sigmoid output gate)
    # and GQA softmax attention with RoPE over head_dim (12 != hidden/heads); a sparse
    # MoE in every layer (softmax router, top-2 of 4 renormalised, SwiGLU experts).
    # The residual of each half is the normed input, weighted by the alpha and beta
    # factors (all != 1 here). block_size 4: the full forward crosses lightning blocks
    # (the slope and decay buffers, which it sizes, are saved with the weights).
    dict(
        name="minimax_tiny",
        model_cls="MiniMaxForCausalLM",
        config_cls="MiniMaxConfig",
        seed=1126,
        prompt_len=9,
        new_tokens=8,
        config=dict(
            vocab_size=320, hidden_size=32, intermediate_size=16, num_hidden_layers=4,
            layer_types=["linear_attention", "full_attention", "linear_attention",
                         "linear_attention"],
            num_attention_heads=4, num_key_value_heads=2, head_dim=12, hidden_act="silu",
            num_local_experts=4, num_experts_per_tok=2, block_size=4,
            full_attn_alpha_factor=0.9, full_attn_beta_factor=1.2,
            linear_attn_alpha_factor=1.3, linear_attn_beta_factor=0.8,
            mlp_alpha_factor=1.1, mlp_beta_factor=0.7,
            rms_norm_eps=1e-5, tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        ),
        layers=["mlp:MiniMaxSparseMoeBlock self_attn:MiniMaxLightningAttention",
                "mlp:MiniMaxSparseMoeBlock self_attn:MiniMaxAttention",
                "mlp:MiniMaxSparseMoeBlock self_attn:MiniMaxLightningAttention",
                "mlp:MiniMaxSparseMoeBlock self_attn:MiniMaxLightningAttention"],
        probes=[("full_attn_alpha_factor 0.9 -> 1", {"full_attn_alpha_factor": 1.0}),
                ("full_attn_beta_factor 1.2 -> 1", {"full_attn_beta_factor": 1.0}),
                ("linear_attn_alpha_factor 1.3 -> 1", {"linear_attn_alpha_factor": 1.0}),
                ("linear_attn_beta_factor 0.8 -> 1", {"linear_attn_beta_factor": 1.0}),
                ("mlp_alpha_factor 1.1 -> 1", {"mlp_alpha_factor": 1.0}),
                ("mlp_beta_factor 0.7 -> 1", {"mlp_beta_factor": 1.0}),
                ("num_experts_per_tok 2 -> 1", {"num_experts_per_tok": 1}),
                ("rope_theta 1e4 -> 1e6", {"rope_parameters": {"rope_type": "default", "rope_theta": 1e6}})],
        all_experts=True,
    ),
    # OLMo Hybrid: Gated DeltaNet layers (separate q, k, v, a, b, g projections; a
    # short causal conv with SiLU for each of q, k and v; 4 value heads over 2 key
    # heads; l2-normalised q and k; beta = 2 sigmoid(b) with linear_allow_neg_eigval,
    # so the state may flip sign; a gated RMSNorm of eps 1e-5 per value head), pre-norm
    # with a SwiGLU MLP; and attention layers (QK RMSNorm over all heads, RoPE, GQA)
    # that are post-norm: x + norm(attn(x)), then + norm(mlp(.)). The q/k norm weights
    # are near 2 so that the scores are not flat.
    dict(
        name="olmo_hybrid_tiny",
        model_cls="OlmoHybridForCausalLM",
        config_cls="OlmoHybridConfig",
        seed=1127,
        prompt_len=9,
        new_tokens=8,
        config=dict(
            vocab_size=320, hidden_size=32, intermediate_size=48, num_hidden_layers=4,
            layer_types=["linear_attention", "full_attention", "linear_attention",
                         "linear_attention"],
            num_attention_heads=4, num_key_value_heads=2, hidden_act="silu",
            linear_conv_kernel_dim=4, linear_key_head_dim=8, linear_value_head_dim=6,
            linear_num_key_heads=2, linear_num_value_heads=4, linear_allow_neg_eigval=True,
            attention_bias=False, rms_norm_eps=1e-6, tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        ),
        layers=["linear_attn:OlmoHybridGatedDeltaNet mlp:OlmoHybridMLP",
                "mlp:OlmoHybridMLP self_attn:OlmoHybridAttention",
                "linear_attn:OlmoHybridGatedDeltaNet mlp:OlmoHybridMLP",
                "linear_attn:OlmoHybridGatedDeltaNet mlp:OlmoHybridMLP"],
        probes=[("linear_allow_neg_eigval -> False", {"linear_allow_neg_eigval": False}),
                ("rope_theta 1e4 -> 1e6", {"rope_parameters": {"rope_type": "default", "rope_theta": 1e6}})],
        init={"self_attn.q_norm.weight": ("normal", 2.0, 0.2),
              "self_attn.k_norm.weight": ("normal", 2.0, 0.2)},
    ),
    # Jamba with experts: softmax over all experts, top-k, weights NOT renormalised.
    # jamba_moe: 4 experts, top-2, MoE at layers 1 and 3 (expert_layer_period 2, offset 1),
    # attention at layer 1 (an attention layer with MoE and a Mamba layer with MoE); every
    # expert of both MoE layers is picked by the fixture's tokens. jamba_moe_top1: MoE in
    # every layer, 5 experts, top-1.
    dict(
        name="jamba_moe",
        model_cls="JambaForCausalLM",
        config_cls="JambaConfig",
        seed=1111,
        prompt_len=9,
        new_tokens=8,
        config=dict(
            vocab_size=256, hidden_size=32, intermediate_size=48, num_hidden_layers=4,
            attn_layer_period=4, attn_layer_offset=1,
            expert_layer_period=2, expert_layer_offset=1,
            num_experts=4, num_experts_per_tok=2,
            num_attention_heads=4, num_key_value_heads=2,
            mamba_d_state=8, mamba_d_conv=4, mamba_expand=2, mamba_dt_rank="auto",
            mamba_conv_bias=True, mamba_proj_bias=False, rms_norm_eps=1e-6,
            tie_word_embeddings=False, use_mamba_kernels=False,
        ),
        expect=dict(mamba_dt_rank=2),
        layers=["feed_forward:JambaMLP mamba:JambaMambaMixer",
                "feed_forward:JambaSparseMoeBlock self_attn:JambaAttention",
                "feed_forward:JambaMLP mamba:JambaMambaMixer",
                "feed_forward:JambaSparseMoeBlock mamba:JambaMambaMixer"],
        probes=[("num_experts_per_tok 2 -> 1", {"num_experts_per_tok": 1})],
        all_experts=True,
    ),
    dict(
        name="jamba_moe_top1",
        model_cls="JambaForCausalLM",
        config_cls="JambaConfig",
        seed=1112,
        prompt_len=8,
        new_tokens=8,
        config=dict(
            vocab_size=256, hidden_size=32, intermediate_size=24, num_hidden_layers=3,
            attn_layer_period=3, attn_layer_offset=2,
            expert_layer_period=1, expert_layer_offset=0,
            num_experts=5, num_experts_per_tok=1,
            num_attention_heads=4, num_key_value_heads=2,
            mamba_d_state=8, mamba_d_conv=4, mamba_expand=2, mamba_dt_rank=3,
            mamba_conv_bias=True, mamba_proj_bias=True, rms_norm_eps=1e-6,
            tie_word_embeddings=False, use_mamba_kernels=False,
        ),
        layers=["feed_forward:JambaSparseMoeBlock mamba:JambaMambaMixer"] * 2
        + ["feed_forward:JambaSparseMoeBlock self_attn:JambaAttention"],
        probes=[("num_experts_per_tok 1 -> 2", {"num_experts_per_tok": 2})],
    ),
    # Mamba-2 with a dt clamp that bites at both ends in the chunked scan of the full
    # forward (transformers' single-token path does not clamp: see decode_clamp).
    dict(
        name="mamba2_dt_limit",
        model_cls="Mamba2ForCausalLM",
        config_cls="Mamba2Config",
        seed=1113,
        prompt_len=10,
        new_tokens=6,
        config=dict(
            vocab_size=256, hidden_size=32, expand=2, num_heads=4, head_dim=16,
            state_size=16, n_groups=2, conv_kernel=4, num_hidden_layers=2,
            tie_word_embeddings=True, use_bias=False, use_conv_bias=True,
            layer_norm_epsilon=1e-5, chunk_size=4, time_step_limit=(0.01, 0.08),
        ),
        layers=["mixer:Mamba2Mixer"] * 2,
        probes=[
            ("time_step_limit -> (0, inf)", {"time_step_limit": (0.0, float("inf"))}),
            ("time_step_limit -> (0.01, inf)", {"time_step_limit": (0.01, float("inf"))}),
            ("time_step_limit -> (0, 0.08)", {"time_step_limit": (0.0, 0.08)}),
        ],
        decode_clamp=True,
        clamp_bounds=("lo", "hi"),
    ),
]

for _fx in ZOO_FIXTURES:
    _fx["kind"] = "zoo"
    _fx.setdefault("dtype", "f32")
    _fx.setdefault("shard", None)
