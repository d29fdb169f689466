"""The Llama demo's EAGLE-3 draft network, in plain torch: SGLang's ``LlamaForCausalLMEagle3`` with a
training-time-test unroll.

It mirrors SGLang's layout (``fc`` over the concatenated aux states, one decoder layer over
``[embeds, hidden]``, its own ``lm_head`` over a reduced draft vocabulary) so that the weights it
trains load into SGLang as they are. ``unroll`` computes every draft step at every position as
SGLang's draft decode does, which both training and the acceptance replay use. torch is imported
only when a draft is made: ``import eagle3scope.demo`` stays light.
"""

from __future__ import annotations

from eagle3scope.demo.recipe import AUX_LAYER_IDS, DRAFT_INTERMEDIATE, DRAFT_VOCAB, TARGET


def make_draft(embed):
    """A fresh draft module whose token embedding is ``embed`` (the target's, frozen: SGLang shares it)."""
    import torch
    from torch import nn

    hidden = TARGET["hidden_size"]
    heads = TARGET["num_attention_heads"]
    kv_heads = TARGET["num_key_value_heads"]
    head_dim = hidden // heads
    eps = TARGET["rms_norm_eps"]

    class RMSNorm(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(dim))

        def forward(self, x):
            return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)

    def rope(x, pos):
        inv = 1.0 / (TARGET["rope_theta"] ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        ang = pos[:, None, :, None].float() * inv  # [batch, 1 (heads), seq, head_dim/2]
        cos, sin = torch.cat([ang, ang], -1).cos(), torch.cat([ang, ang], -1).sin()
        x1, x2 = x[..., : head_dim // 2], x[..., head_dim // 2 :]
        return x * cos + torch.cat([-x2, x1], -1) * sin

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.q_proj = nn.Linear(2 * hidden, heads * head_dim, bias=False)
            self.k_proj = nn.Linear(2 * hidden, kv_heads * head_dim, bias=False)
            self.v_proj = nn.Linear(2 * hidden, kv_heads * head_dim, bias=False)
            self.o_proj = nn.Linear(heads * head_dim, hidden, bias=False)

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.gate_proj = nn.Linear(hidden, DRAFT_INTERMEDIATE, bias=False)
            self.up_proj = nn.Linear(hidden, DRAFT_INTERMEDIATE, bias=False)
            self.down_proj = nn.Linear(DRAFT_INTERMEDIATE, hidden, bias=False)

        def forward(self, x):
            return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.self_attn = Attention()
            self.mlp = MLP()
            self.input_layernorm = RMSNorm(hidden)
            self.hidden_norm = RMSNorm(hidden)
            self.post_attention_layernorm = RMSNorm(hidden)

    class Draft(nn.Module):
        """SGLang's LlamaForCausalLMEagle3 with a training-time-test unroll."""

        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(len(AUX_LAYER_IDS) * hidden, hidden, bias=False)
            self.layers = nn.ModuleList([Layer()])
            self.norm = RMSNorm(hidden)
            self.lm_head = nn.Linear(hidden, DRAFT_VOCAB, bias=False)
            self.embed = embed  # the target's, as SGLang shares it (set_embed); frozen

        def qkv(self, tokens, h, pos):
            layer = self.layers[0]
            x = torch.cat([layer.input_layernorm(self.embed(tokens)), layer.hidden_norm(h)], -1)
            b, n = tokens.shape
            q = layer.self_attn.q_proj(x).view(b, n, heads, head_dim).transpose(1, 2)
            k = layer.self_attn.k_proj(x).view(b, n, kv_heads, head_dim).transpose(1, 2)
            v = layer.self_attn.v_proj(x).view(b, n, kv_heads, head_dim).transpose(1, 2)
            rep = heads // kv_heads
            return rope(q, pos), rope(k, pos).repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)

        def finish(self, attn, residual):
            layer = self.layers[0]
            b, _, n, _ = attn.shape
            residual = layer.self_attn.o_proj(attn.transpose(1, 2).reshape(b, n, hidden)) + residual
            out = layer.mlp(layer.post_attention_layernorm(residual)) + residual
            return self.lm_head(self.norm(out)), out

        def unroll(self, tokens, feats, steps, next_tokens=None):
            """Logits of each draft step at every position, as SGLang's draft computes them.

            Step 0 reads (token i+1, target features i) at position i and attends causally
            over all step-0 entries; step j reads the step j-1 hidden state at position i+j
            and also attends to its own entries of steps 1..j (the draft's decode KV).
            ``next_tokens(j, logits)`` gives step j's input tokens (teacher-forced or fed
            back).
            """
            b, n = tokens.shape
            pos0 = torch.arange(n).expand(b, n)
            h = self.fc(feats)
            q, k0, v0 = self.qkv(tokens, h, pos0)
            causal = torch.ones(n, n, dtype=torch.bool).tril()
            scale = head_dim**-0.5
            extra_k, extra_v, outs = [], [], []
            for j in range(steps):
                if j:
                    q, k, v = self.qkv(next_tokens(j, outs[-1]), h, pos0 + j)
                    extra_k.append(k)
                    extra_v.append(v)
                s = (q @ k0.transpose(-1, -2) * scale).masked_fill(~causal, float("-inf"))
                diag = [(q * k).sum(-1, keepdim=True) * scale for k in extra_k]
                p = torch.cat([s, *diag], -1).softmax(-1)
                attn = p[..., :n] @ v0
                for m, v in enumerate(extra_v):
                    attn = attn + p[..., n + m : n + m + 1] * v
                logits, h = self.finish(attn, h)
                outs.append(logits)
            return outs

    return Draft()
