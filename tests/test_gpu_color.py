"""The fused CUDA color kernel's own contract (gpuaug.gpu_color), run without a GPU through
Triton's interpreter: agreement with the torch kernels on programs the pipeline never writes,
every dtype and channel count, argument checks, and the fallback when a launch fails. Its results
against torchvision are checked in test_reference.py (the ``cuda kernels`` runs); on a real GPU,
tests/test_cuda.py runs it compiled."""

import pytest
import torch

import gpuaug as ga
import gpuaug.pipeline as pipeline_module
from gpuaug import native
from gpuaug.functional import color as gaF


@pytest.fixture
def kernel(interpreted_gpu_color, monkeypatch):
    monkeypatch.setattr(interpreted_gpu_color, "_state", {})
    return interpreted_gpu_color


def _args(n=2, C=3, S=2, shape=(8, 8)):
    x = torch.rand(n, C, *shape, generator=torch.Generator().manual_seed(0))
    ops = torch.full((n, S), native.OP_BRIGHTNESS, dtype=torch.int32)
    return x, torch.empty_like(x), ops, torch.full((n, S), 0.5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_program_steps_match_the_torch_kernels(kernel, dtype):
    x = torch.rand(4, 3, 40, 70, generator=torch.Generator().manual_seed(1))  # 2800 px: a partial tile
    # Two contrast steps in one program (two ColorJitters): each takes the mean of its own input;
    # rows differ per sample, as the pipeline's do.
    ops = torch.tensor([[2, 4, 2, 3, 1], [1, 3, 4, 2, 0], [4, 0, 0, 0, 2], [0, 0, 0, 0, 0]], dtype=torch.int32)
    factors = torch.tensor([[1.7, 0.3, 0.4, 1.5, 1.2], [0.6, 0.0, -0.45, 1.3, 9.0], [0.5, 0, 0, 0, 0.2], [0.0] * 5])
    mean, inv_std = torch.tensor(ga.IMAGENET_MEAN), 1 / torch.tensor(ga.IMAGENET_STD)
    out = torch.empty(x.shape, dtype=dtype)
    kernel.color_program(x.to(dtype), out, ops, factors, mean, inv_std)
    xin = x.to(dtype).float()
    refs = [
        gaF.adjust_brightness(gaF.adjust_saturation(gaF.adjust_contrast(gaF.adjust_hue(
            gaF.adjust_contrast(xin[0:1], 1.7), 0.3), 0.4), 1.5), 1.2),
        gaF.adjust_contrast(gaF.adjust_hue(gaF.adjust_saturation(gaF.adjust_brightness(xin[1:2], 0.6), 0.0), -0.45), 1.3),
        gaF.adjust_contrast(gaF.adjust_hue(xin[2:3], 0.5), 0.2),
        xin[3:4],
    ]
    ref = gaF.normalize(torch.cat(refs), mean, std=torch.tensor(ga.IMAGENET_STD))
    tol = 1e-5 if dtype == torch.float32 else 5e-2  # one rounding of the output, in [-2.2, 2.7]
    assert (out.float() - ref).abs().max() < tol


def test_one_channel_takes_blends_only(kernel):
    x = torch.rand(3, 1, 24, 24, generator=torch.Generator().manual_seed(2))
    ops = torch.tensor([[3, 4, 2, 1]] * 3, dtype=torch.int32)  # saturation and hue do nothing here
    factors = torch.tensor([[0.0, 0.3, 0.5, 1.4]] * 3)
    out = torch.empty_like(x)
    kernel.color_program(x, out, ops, factors)
    assert (out - gaF.adjust_brightness(gaF.adjust_contrast(x, 0.5), 1.4)).abs().max() < 1e-6


def test_no_steps_only_normalize(kernel):
    x, out, _, _ = _args()
    kernel.color_program(x, out, torch.zeros(2, 0, dtype=torch.int32), torch.zeros(2, 0),
                         torch.tensor([0.5, 0.4, 0.3]), torch.tensor([2.0, 3.0, 4.0]))
    assert (out - (x - torch.tensor([0.5, 0.4, 0.3]).view(1, 3, 1, 1)) * torch.tensor([2.0, 3.0, 4.0]).view(1, 3, 1, 1)).abs().max() < 1e-6


def test_agrees_with_the_fused_cpu_kernel(kernel):
    if not native.available():
        pytest.skip("no C compiler here")
    pipe = ga.Pipeline(ga.ColorJitter(0.4, 0.4, 0.4, 0.1), ga.RandomGrayscale(0.3), device="cpu", seed=5)
    params = [op.make_params(ga.transforms._base.Draw(6, torch.device("cpu"), torch.Generator().manual_seed(3),
                                                      ga.transforms._base.Sizes(uniform=(20, 30))))
              for op in pipe.ops]
    programs = [op.program(p) for op, p in zip(pipe.ops, params)]
    ops, factors = torch.cat([p[0] for p in programs], 1), torch.cat([p[1] for p in programs], 1)
    x = torch.rand(6, 3, 20, 30, generator=torch.Generator().manual_seed(4))
    a, b = torch.empty_like(x), torch.empty_like(x)
    kernel.color_program(x, a, ops, factors)
    native.color_program(x, b, torch.arange(6), ops, factors)
    assert (a - b).abs().max() < 1e-5


@pytest.mark.parametrize("change,error,message", [
    (lambda a: a.__setitem__(0, a[0].to(torch.uint8)), TypeError, "expected float images"),
    (lambda a: a.__setitem__(0, torch.rand(2, 2, 8, 8)), ValueError, r"C in \{1, 3\}"),
    (lambda a: a.__setitem__(1, torch.empty(2, 3, 4, 4)), ValueError, "out should be contiguous with x's shape"),
    (lambda a: a.__setitem__(1, torch.empty(2, 8, 8, 3).permute(0, 3, 1, 2)), ValueError, "out should be contiguous"),
    (lambda a: a.__setitem__(2, a[2].long()), TypeError, "ops should be int32"),
    (lambda a: a.__setitem__(3, torch.zeros(2, 3)), ValueError, r"ops and factors should both be \(B=2, S\)"),
])
def test_bad_arguments_are_refused_before_the_launch(kernel, change, error, message):
    args = list(_args())
    change(args)
    with pytest.raises(error, match=message):
        kernel.color_program(*args)
    x, out, ops, factors = _args()
    with pytest.raises(ValueError, match="mean and inv_std"):
        kernel.color_program(x, out, ops, factors, torch.zeros(3), None)


def test_usable_only_on_cuda_and_not_when_disabled(kernel, monkeypatch):
    assert not kernel.usable(torch.device("cpu"))
    monkeypatch.delenv("GPUAUG_TRITON", raising=False)
    assert kernel.usable(torch.device("cuda"))  # a question about the setup: nothing touches CUDA
    monkeypatch.setenv("GPUAUG_TRITON", "0")
    assert not kernel.usable(torch.device("cuda"))


def test_a_failing_launch_warns_once_and_the_pipeline_uses_torch_kernels(kernel, monkeypatch, small_photos):
    monkeypatch.delenv("GPUAUG_TRITON", raising=False)
    monkeypatch.setattr(ga.cpu, "OWN_PATH", False)
    x = torch.stack(small_photos)
    ops = [ga.ColorJitter(0.4, 0.4, 0.4, 0.1), ga.Normalize(ga.IMAGENET_MEAN, ga.IMAGENET_STD)]
    expected = ga.Pipeline(*ops, device="cpu", seed=1)(x)  # the torch kernels (no gpu_color on the CPU)

    def broken(*args, **kwargs):
        raise RuntimeError("no kernel image is available for execution on the device")

    monkeypatch.setattr(kernel, "color_program", broken)
    monkeypatch.setattr(pipeline_module, "_gpu_color", lambda device: kernel if kernel.usable("cuda") else None)
    with pytest.warns(RuntimeWarning, match="Triton color kernel failed.*no kernel image"):
        out = ga.Pipeline(*ops, device="cpu", seed=1)(x)
    assert torch.equal(out, expected)
    assert not kernel.usable(torch.device("cuda"))  # off for the process: no warning per batch


@pytest.mark.parametrize("arch", [80, 90])  # A100, H100/H200
def test_kernels_compile_for_the_gpus_we_target(arch):
    """The interpreter above checks what the kernels compute, not that Triton's compiler takes
    them: compile both to a cubin (ptxas runs; no GPU needed) for every dtype and channel count."""
    triton = pytest.importorskip("triton")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from gpuaug import gpu_color

    target = GPUTarget("cuda", arch, 32)
    for dtype in ("fp16", "bf16", "fp32"):
        for channels in (1, 3):
            color = {"src": f"*{dtype}", "out": f"*{dtype}", "ops": "*i32", "factors": "*fp32",
                     "contrast_means": "*fp32", "mean": "*fp32", "inv_std": "*fp32", "pixels": "i32",
                     "STEPS": "constexpr", "CHANNELS": "constexpr", "NORMALIZE": "constexpr", "BLOCK": "constexpr"}
            means = {"src": f"*{dtype}", "ops": "*i32", "factors": "*fp32", "contrast_means": "*fp32", "pixels": "i32",
                     "step": "i32", "STEPS": "constexpr", "CHANNELS": "constexpr", "BLOCK": "constexpr"}
            constants = {"STEPS": 5, "CHANNELS": channels, "BLOCK": gpu_color.BLOCK}
            for fn, signature, extra in ((gpu_color._color_kernel, color, {"NORMALIZE": True}),
                                         (gpu_color._contrast_mean_kernel, means, {})):
                compiled = triton.compile(ASTSource(fn, signature, constexprs={**constants, **extra}), target=target)
                assert len(compiled.asm["cubin"]) > 0
