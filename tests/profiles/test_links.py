"""KV link profiles: datasheet numbers with their sources, custom and tuned links."""

from __future__ import annotations

from capsim.profiles.links import load_link, resolve_link, LinkNumbers

NDR = 50e9            # InfiniBand NDR: 400 Gb/s per port = 50e9 bytes/s per direction


def test_link_profiles_are_datasheet_numbers_with_sources():
    ndr = load_link("infiniband-ndr")
    assert ndr.bandwidth_bytes_per_s == NDR and "connectx7" in ndr.sources["bandwidth_bytes_per_s"]
    assert load_link("roce-200g").bandwidth_bytes_per_s == 25e9
    assert load_link("nvlink-4").bandwidth_bytes_per_s == 450e9      # 900 GB/s bidirectional
    assert load_link("pcie-gen5-x16").bandwidth_bytes_per_s == 64e9
    custom = resolve_link(LinkNumbers(bandwidth_gbit_per_s=400, latency_s=1e-4))
    assert custom.bandwidth_bytes_per_s == NDR and custom.latency_s == 1e-4
    tuned = resolve_link(LinkNumbers(name="infiniband-ndr", latency_s=0.0))
    assert tuned.bandwidth_bytes_per_s == NDR and tuned.latency_s == 0.0


def test_a_user_link_without_sources_loads_with_a_warning(tmp_path, caplog):
    path = tmp_path / "my-link.yaml"
    path.write_text("name: my-link\ndisplay_name: my link\nkind: roce\n"
                    "bandwidth_bytes_per_s: 25e9\nlatency_s: 5e-6\n")
    link = load_link(path)
    assert (link.bandwidth_bytes_per_s, link.latency_s, link.sources) == (25e9, 5e-6, {})
    assert [r.getMessage() for r in caplog.records] == [
        f"{path}: sources has no entry for bandwidth_bytes_per_s, latency_s: the link is used "
        "as it is; say where each number comes from (a datasheet URL, a measurement, or "
        "'estimate: why')"]
