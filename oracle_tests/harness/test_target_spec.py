"""Target specs are parsed once (``harness.targets.TargetSpec``): the kinds, the canonical spelling,
the one-line errors, and the configuration keys each target knows (Note [Target specs])."""

from __future__ import annotations

import pickle

import pytest

from kernel_oracle.fuzz.targets import resolve_target, target_configuration
from kernel_oracle.harness.targets import TargetError, TargetSources, TargetSpec, parse_target_list

# spec -> (kind, name, release, variant, mutant, module, attr, configuration)
SPECS = {
    "reference": ("builtin", "reference", None, None, None, None, None, ()),
    "sglang": ("builtin", "sglang", None, "default", None, None, None, ()),
    "sglang-trt": ("builtin", "sglang-trt", None, "trt", None, None, None, ()),
    "sglang==0.5.23": ("release", "sglang", "0.5.23", "default", None, None, None, ()),
    "sglang-trt==0.5.15.post1": ("release", "sglang-trt", "0.5.15.post1", "trt", None, None, None, ()),
    "sglang==0.5.23@pdl=off": ("release", "sglang", "0.5.23", "default", None, None, None, (("pdl", "off"),)),
    "triton@vision_fp32=tf32": ("builtin", "triton", None, None, None, None, None, (("vision_fp32", "tf32"),)),
    "mutant:lora_wrong_slot": ("mutant", "mutant", None, None, "lora_wrong_slot", None, None, ()),
    "my_pkg.kernels": ("module", "module", None, None, None, "my_pkg.kernels", None, ()),
    "my_pkg.kernels:Backend": ("module", "module", None, None, None, "my_pkg.kernels", "Backend", ()),
    "flat_module:forward": ("module", "module", None, None, None, "flat_module", "forward", ()),
}


@pytest.mark.parametrize("text", sorted(SPECS))
def test_a_spec_parses_into_its_fields_and_round_trips(text):
    spec = TargetSpec.parse(text)
    kind, name, release, variant, mutant, module, attr, configuration = SPECS[text]
    assert (spec.kind, spec.name, spec.release, spec.variant, spec.mutant, spec.module, spec.attr,
            spec.configuration) == (kind, name, release, variant, mutant, module, attr, configuration)
    assert str(spec) == text and TargetSpec.parse(str(spec)) == spec
    assert hash(spec) == hash(TargetSpec.parse(text)) and pickle.loads(pickle.dumps(spec)) == spec
    assert eval(repr(spec), {"TargetSpec": TargetSpec}) == spec  # the repr reads as code


def test_configuration_is_kept_sorted_so_the_spelling_is_canonical():
    a, b = TargetSpec.parse("triton@b=2,a=1"), TargetSpec.parse("triton@a=1,b=2")
    assert a == b and str(a) == "triton@a=1,b=2" and a.option("b") == "2" and a.option("c", "x") == "x"
    assert a.base == "triton" and TargetSpec("triton", configuration=(("b", "2"), ("a", "1"))) == a


# malformed spec -> what the message must say after the shared "Expected a target spec such as ..." head
MALFORMED = {
    "": "pass a non-empty string",
    "triton@": "the configuration after '@' is empty: pass @key=value[,key=value...]",
    "triton@vision_fp32": "configuration item 'vision_fp32' is not key=value",
    "triton@a=1,a=2": "configuration key 'a' is given twice",
    "triton@A=1": "configuration A='1' is not key=value with a lower-case key and a value of letters, digits "
                  "and '_.+-'",
    "torch==2.13": "only sglang, sglang-trt, sglang-v2, sglang-csgmv take ==RELEASE",
    "sglang==": "the release after '==' is empty or has characters a version never has",
    "mutant": "pass mutant:NAME",
    "module": "pass package.module[:attr]",
    "mutant:": "a mutant spec is mutant:NAME (letters, digits and underscores)",
    "my_pkg..kernels": "a module spec is package.module or package.module:attr",
    "my_pkg.kernels:": "a module spec is package.module or package.module:attr",
    "tri ton": "a spec has no spaces",
}


@pytest.mark.parametrize("text", sorted(MALFORMED))
def test_a_malformed_spec_is_one_error_that_says_what_to_pass(text):
    with pytest.raises(TargetError) as info:
        TargetSpec.parse(text)
    assert str(info.value) == ("Expected a target spec such as 'reference', 'triton', 'sglang==0.5.23', "
                               "'mutant:NAME' or 'package.module[:attr]', optionally with @key=value[,key=value...], "
                               f"but got spec={text!r}: {MALFORMED[text]}")


def test_a_target_list_splits_on_commas_outside_configurations():
    specs = parse_target_list(" triton@vision_fp32=tf32,mode=x ,sglang==0.5.23,,mutant:lora_wrong_slot")
    assert [str(s) for s in specs] == ["triton@mode=x,vision_fp32=tf32", "sglang==0.5.23", "mutant:lora_wrong_slot"]
    with pytest.raises(TargetError, match="configuration key 'a' is given twice"):
        parse_target_list("triton@a=1,a=2")


def test_unknown_configuration_keys_and_values_are_refused_with_the_known_ones():
    assert target_configuration("triton") == {"vision_fp32": ("ieee", "tf32"), "lora_early_reads": ("on", "off"),
                                              "vision_kernel": ("triton", "gluon")}
    with pytest.raises(TargetError) as info:
        resolve_target("triton@pdl=off", "cpu")
    assert str(info.value) == ("target 'triton@pdl=off': configuration key 'pdl' is unknown; the only valid keys are "
                               "['lora_early_reads', 'vision_fp32', 'vision_kernel']")
    with pytest.raises(TargetError) as info:
        resolve_target("triton@vision_fp32=bf16", "cpu")
    assert str(info.value) == ("target 'triton@vision_fp32=bf16': vision_fp32='bf16' is invalid; the only valid values "
                               "are 'ieee', 'tf32'")
    with pytest.raises(TargetError) as info:
        resolve_target("reference@pdl=off", "cpu")
    assert str(info.value) == ("target 'reference@pdl=off': configuration key 'pdl' is unknown; reference "
                               "takes no configuration: pass 'reference'")
    with pytest.raises(TargetError) as info:  # the vision wrapper's FlashInfer release is its one key
        resolve_target("sglang==0.5.23@pdl=off", "cpu")
    assert str(info.value) == ("target 'sglang==0.5.23@pdl=off': configuration key 'pdl' is unknown; the only valid "
                               "keys are ['engine']")


def test_an_unknown_name_lists_the_built_in_targets():
    with pytest.raises(TargetError, match=r"target='refrence' is unknown; the only built-in targets are \[.*'triton'"):
        resolve_target("refrence", "cpu")


def test_targets_are_resolved_once_per_spec_device_and_sources():
    a, b = resolve_target("reference", "cpu"), resolve_target(TargetSpec.parse("reference"), "cpu")
    assert a is b
    assert resolve_target("reference", "cpu", sources=TargetSources(sglang_wheel="/nowhere")) is not a


def test_triton_takes_the_vision_fp32_configuration():
    t = resolve_target("triton@vision_fp32=tf32", "cpu")
    assert t.available and t.name == "triton@vision_fp32=tf32"
    assert t.precision_for("vision") == "ieee"  # the interpreter's tl.dot is exact fp32 whatever is asked
    assert resolve_target("triton@vision_fp32=ieee", "cpu").available


def test_triton_takes_the_lora_early_reads_configuration():
    from kernel_oracle.kernels.options import current_options

    t = resolve_target("triton@lora_early_reads=on", "cpu")
    with_reads = t.entry("step_a_q")
    # the wrapper applies the option for the call only: the kernel sees it, the caller's block does not
    assert getattr(with_reads, "launch_options", None) == {"lora": {"early_reads": True}}
    assert not current_options().lora.early_reads
    assert resolve_target("triton@lora_early_reads=off", "cpu").entry("step_a_q") is \
        resolve_target("triton", "cpu").entry("step_a_q")
