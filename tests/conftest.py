"""Shared fixtures: a small random Llama with the course's character tokenizer."""

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")


@pytest.fixture(scope="session")
def char_tokenizer():
    from grpo_edu.training.model.tokenizer import build_char_tokenizer

    return build_char_tokenizer()


@pytest.fixture
def random_model(char_tokenizer):
    """A freshly initialised 2-layer Llama (seeded): fast, and a real transformers model."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = char_tokenizer
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=4, intermediate_size=64, max_position_embeddings=32,
                      tie_word_embeddings=True, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                      pad_token_id=tok.pad_token_id)
    return LlamaForCausalLM(cfg)


@pytest.fixture
def live_writer():
    """live_writer(code) → a context manager: a child Python process runs ``code`` (which opens what it
    holds), says it is ready, and waits; it yields the child's pid and SIGKILLs it on exit (a crash)."""
    import contextlib
    import signal
    import subprocess
    import sys
    import textwrap

    @contextlib.contextmanager
    def run(code):
        script = textwrap.dedent(code) + "\nimport time\nprint('ready', flush=True)\ntime.sleep(120)\n"
        child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
        try:
            assert child.stdout.readline().strip() == "ready"
            yield child.pid
        finally:
            os.kill(child.pid, signal.SIGKILL)
            child.wait()
    return run
