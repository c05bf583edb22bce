"""Write a tiny random-weight llama-architecture GGUF (byte-level SentencePiece vocabulary, ~0.5 MB) so a real
llama.cpp / llama-cpp-python server can run on a machine that cannot download model weights.

    .venv-llama/bin/python scripts/make_toy_gguf.py /tmp/toy.gguf

Its answers are noise; what it is for is the server's own behaviour: slots and prefix reuse, model-name handling,
context-size errors, restarts (scripts/check_llama_cpp_server.py). Needs ``gguf`` and ``numpy``.
"""

from __future__ import annotations

import sys

import numpy as np


def main(path: str, n_ctx: int = 16384) -> None:
    import gguf

    rng = np.random.default_rng(0)
    n_embd, n_layer, n_head, n_ff = 64, 2, 4, 128
    tokens = [b"<unk>", b"<s>", b"</s>"] + [f"<0x{b:02X}>".encode() for b in range(256)] + ["\u2581".encode()]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL] + \
        [gguf.TokenType.BYTE] * 256 + [gguf.TokenType.NORMAL]
    n_vocab = len(tokens)

    writer = gguf.GGUFWriter(path, "llama")
    writer.add_name("ctx-retrieval-toy")
    writer.add_context_length(n_ctx)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(n_layer)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head)
    writer.add_rope_dimension_count(n_embd // n_head)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores([0.0] * n_vocab)
    writer.add_token_types(types)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    writer.add_chat_template("{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
                             "<|assistant|>\n")

    def tensor(name: str, *shape: int, scale: float = 0.02) -> None:
        writer.add_tensor(name, (rng.standard_normal(shape) * scale).astype(np.float32))

    tensor("token_embd.weight", n_vocab, n_embd)
    writer.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
    tensor("output.weight", n_vocab, n_embd)
    for layer in range(n_layer):
        writer.add_tensor(f"blk.{layer}.attn_norm.weight", np.ones(n_embd, dtype=np.float32))
        writer.add_tensor(f"blk.{layer}.ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
        for part in ("attn_q", "attn_k", "attn_v", "attn_output"):
            tensor(f"blk.{layer}.{part}.weight", n_embd, n_embd)
        tensor(f"blk.{layer}.ffn_gate.weight", n_ff, n_embd)
        tensor(f"blk.{layer}.ffn_up.weight", n_ff, n_embd)
        tensor(f"blk.{layer}.ffn_down.weight", n_embd, n_ff)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


if __name__ == "__main__":
    main(sys.argv[1])
