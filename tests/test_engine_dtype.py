"""dtype "auto": bf16 only where the CPU computes it natively (fasttts.backends.vllm_engine)."""

from fasttts.backends.vllm_engine import cpu_has_bf16, resolve_dtype
from fasttts.config import EngineConfig

AVX2_ONLY = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma\n"
SAPPHIRE = "processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n"
ZEN4 = "flags\t\t: fpu avx2 avx512f avx512_bf16\n"


def test_cpu_flags_decide_bf16():
    assert not cpu_has_bf16(AVX2_ONLY)
    assert cpu_has_bf16(SAPPHIRE)
    assert cpu_has_bf16(ZEN4)
    assert not cpu_has_bf16("")
    # a flag name that merely contains the text is not the flag
    assert not cpu_has_bf16("flags\t: avx512_bf16x\n")


def test_auto_resolves_per_platform():
    assert resolve_dtype("auto", is_cpu=False) == "auto"       # vLLM's own: the checkpoint's
    assert resolve_dtype("float16", is_cpu=True) == "float16"  # an explicit choice is kept
    assert resolve_dtype("bfloat16", is_cpu=True) == "bfloat16"
    assert resolve_dtype("auto", is_cpu=True) == ("bfloat16" if cpu_has_bf16() else "float32")


def test_default_is_auto():
    assert EngineConfig(model="m").dtype == "auto"
