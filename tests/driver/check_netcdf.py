#!/usr/bin/python3
"""netCDF/CF input and output of tessera-run (docs/driver.md, "netCDF"); CTest label driver.

    check_netcdf.py MODE MPIEXEC RUN CKPT SOURCE_DIR WORK_DIR

MODE
  input    tessera-run stats gives the same statistics (to the last bit) for the HDF5 demo
           data, its netCDF twin stored south-first with longitudes -180..180, and that
           twin split into 2 files read through a glob, at 1, 2 and 4 ranks; training on
           the netCDF variants (one file; a glob; a list in reverse order) gives the same
           losses and a checkpoint identical to training on the HDF5 file; a missing
           variable is an error naming it and the file; a netCDF-3 file is refused with
           the nccopy command; data.normalize without data.stats names data.stats.
  predict  a checkpoint rolled forward 12 steps at 1 rank, domain 2 and tp 2 x domain 2
           from netCDF input stored south first with longitudes -180..180 (and at 1 rank
           from the HDF5 file): the netCDF forecasts keep the input's grid (latitudes south
           first, longitudes from -180, the same values), the HDF5 one is north first from
           0; read back in one orientation every output holds the initial state exactly
           and equals the 1-rank rollout within fp32 rounding (1e-5 of each variable's
           largest magnitude); the time axis is the input's plus the model's step; the CF
           attributes and the provenance are there (read with h5py). predict refuses an
           existing output without --force (exit 1, naming it, the file untouched) and
           replaces it with --force; --force outside predict is a usage error.
  readers  ncdump and xarray (netCDF4 engine) open the committed twin and a prediction;
           exits 77 (CTest: skipped) when either is not installed.
  levels   a variable on a level axis (t(time, level, lat, lon) beside h(time, lat, lon),
           written with netCDF4-python) becomes one channel per level: the same statistics
           at 1 and 2 ranks, named t@<level>; training runs on it; predict writes
           t(time, level, lat, lon) with the level coordinate, which xarray reads back with
           the input's time index as its initial state. Exits 77 without netCDF4/xarray.
  conventions  a forecast keeps its input's conventions: from an ERA5-like file (dimensions
           latitude/longitude, latitudes south first in float32, longitudes -180..174.375,
           an int32 time in hours since 1900, an int32 level with its attributes, a NaN
           _FillValue on the longitudes as xarray writes it) at 1
           and 4 ranks, the forecast has the input's coordinate and dimension names, values,
           order, dtypes and attributes (read with netCDF4 and xarray); xarray aligns it with
           the input exactly (`forecast - input` has the input's dimensions, no others) and
           the initial state minus the input is zero everywhere; every step equals, at
           each coordinate, the forecast from the same data stored north first on 0..360
           with lat/lon names, re-indexed by its coordinates (bit for bit at each rank
           count). An int32 time in days, which cannot hold the 6-hour steps, is written as
           float64 with a warning. Exits 77 without netCDF4/xarray.
  regional a regional grid (86.5-65 N every 0.5 degrees, written with netCDF4-python) is
           weighted by its own latitudes, not as a slice of a global grid: the log names
           explicit_rows, the checkpoint's model keeps the 44 latitudes, and training at
           1 and 2 ranks gives the same losses. Exits 77 without netCDF4.
"""

import glob
import os
import re
import shutil
import subprocess
import sys

import h5py
import numpy as np

MODE, MPIEXEC, RUN, CKPT, SRC, WORK = sys.argv[1:7]
TINY = os.path.join(SRC, "tests/driver/tiny.yaml")
H5 = os.path.join(SRC, "data/rossby_haurwitz.h5")
TWIN = os.path.join(SRC, "data/rossby_haurwitz.nc")
MAKE_NC = os.path.join(SRC, "scripts/rossby-haurwitz-netcdf")
LAYOUT = {1: "{data: none, tensor: 1, domain: 1}", 2: "{data: none, tensor: 1, domain: 2}",
          4: "{data: none, tensor: 2, domain: 2}"}


def fail(message):
    print("FAILED: " + message)
    sys.exit(1)


def run(np_, *args, expect=0):
    cmd = [MPIEXEC, "-n", str(np_), RUN, *args]
    p = subprocess.run(cmd, cwd=SRC, capture_output=True, text=True)
    out = p.stdout + p.stderr
    if expect == 0 and p.returncode != 0:
        fail(f"{' '.join(cmd)} exited {p.returncode}:\n{out}")
    if expect != 0 and p.returncode == 0:
        fail(f"{' '.join(cmd)} succeeded, expected an error:\n{out}")
    return out


def make_variants():
    sn = os.path.join(WORK, "south_first.nc")
    subprocess.run([MAKE_NC, "-o", sn, "--south-first", "--lon-origin", "-180"], check=True, capture_output=True)
    subprocess.run([MAKE_NC, "-o", os.path.join(WORK, "part.nc"), "--split", "2", "--south-first"], check=True,
                   capture_output=True)
    return sn


def stats_of(path):
    with open(path) as f:
        return [line for line in f if line.startswith("  ")]


def mode_input():
    sn = make_variants()
    parts = os.path.join(WORK, "part_*.nc")
    ref = os.path.join(WORK, "stats_h5.yaml")
    run(2, "stats", TINY, f"--set=data.path={H5}", f"--set=data.stats={ref}")
    for np_, path in ((1, sn), (4, sn), (2, parts)):
        out = os.path.join(WORK, f"stats_{np_}.yaml")
        run(np_, "stats", TINY, f"--set=data.path={path}", f"--set=data.stats={out}")
        if stats_of(out) != stats_of(ref):
            fail(f"stats of {path} at {np_} ranks differ from the HDF5 file's:\n{stats_of(out)}\n{stats_of(ref)}")
    with h5py.File(H5, "r") as f:
        mean, std = f["fields"].attrs["mean"], f["fields"].attrs["std"]
    for line, m, s in zip(stats_of(ref), mean, std):
        got = [float(x) for x in re.findall(r"(?:mean|std): ([-0-9.e+]+)", line)]
        if abs(got[0] - m) > 1e-9 * s or abs(got[1] - s) > 1e-9 * s:
            fail(f"stats {line.strip()} vs numpy's mean {m} std {s}")
    print("stats: identical for HDF5, netCDF (south first, -180..180) and a glob of 2 files, at 1, 2, 4 ranks")

    steps = {}
    layout = f"--set=parallelism={LAYOUT[2]}"
    for name, path in (("h5", H5), ("nc", sn), ("glob", parts),
                       ("list", f"[{os.path.join(WORK, 'part_1.nc')}, {os.path.join(WORK, 'part_0.nc')}]")):
        out = run(2, TINY, layout, f"--set=data.path={path}", f"--set=data.stats={ref}",
                  f"--set=checkpoint.dir={os.path.join(WORK, 'ck_' + name)}")
        steps[name] = re.findall(r"step +\d+/\d+  loss \S+", out)
        if len(steps[name]) != 2:
            fail(f"expected 2 progress lines from the {name} run:\n{out}")
        if name != "h5":
            if steps[name] != steps["h5"]:
                fail(f"losses of the {name} run {steps[name]} differ from the HDF5 run's {steps['h5']}")
            d = subprocess.run([CKPT, "diff", os.path.join(WORK, "ck_h5"), os.path.join(WORK, "ck_" + name)],
                               capture_output=True, text=True)
            if "diff: identical" not in d.stdout:
                fail(f"the {name} run's checkpoint differs from the HDF5 run's:\n{d.stdout}{d.stderr}")
    print(f"training: losses {steps['h5']} and checkpoints identical for HDF5, netCDF, glob and list")

    out = run(1, TINY, f"--set=parallelism={LAYOUT[1]}", f"--set=data.path={sn}", f"--set=data.stats={ref}",
              "--set=data.variables=[h, w]", expect=1)
    if not re.search(r"data\.variables: 'w' is not a variable of netCDF file '[^']*south_first\.nc' \(it has h, u, v\)",
                     out):
        fail(f"a missing variable: the error does not name it and the file:\n{out}")
    classic = os.path.join(WORK, "classic.nc")
    with open(classic, "wb") as f:
        f.write(b"CDF\x01" + bytes(60))
    out = run(1, TINY, f"--set=parallelism={LAYOUT[1]}", f"--set=data.path={classic}", expect=1)
    if "netCDF-3 (classic)" not in out or "nccopy -k netCDF-4" not in out:
        fail(f"a netCDF-3 file: expected the nccopy advice:\n{out}")
    out = run(1, TINY, f"--set=parallelism={LAYOUT[1]}", f"--set=data.path={sn}", expect=1)
    if "data.stats" not in out or "tessera-run stats" not in out:
        fail(f"netCDF data with data.normalize and no data.stats: expected an error naming data.stats:\n{out}")
    out = run(1, TINY, f"--set=parallelism={LAYOUT[1]}", f"--set=data.path={os.path.join(WORK, 'none_*.nc')}",
              expect=1)
    if "matches no file" not in out:
        fail(f"a glob that matches nothing:\n{out}")
    print("errors: a missing variable, a netCDF-3 file, no data.stats, an empty glob: each named")


def north_first_0_360(f, v):
    """Variable v of the open file f re-indexed by its own coordinates to tessera's
    orientation: latitudes north first, longitudes eastward from the smallest in [0, 360)."""
    rows = np.argsort(-f["lat"][()], kind="stable")
    cols = np.argsort(np.mod(f["lon"][()], 360.0), kind="stable")
    return f[v][()][..., rows, :][..., cols]


def mode_predict():
    sn = make_variants()
    stats = os.path.join(WORK, "stats.yaml")
    run(1, "stats", TINY, f"--set=data.path={sn}", f"--set=data.stats={stats}")
    ck = os.path.join(WORK, "ck")
    run(2, TINY, f"--set=parallelism={LAYOUT[2]}", f"--set=data.path={sn}", f"--set=data.stats={stats}",
        f"--set=checkpoint.dir={ck}")
    outputs = {}
    for np_, path in ((1, H5), (1, sn), (2, sn), (4, sn)):
        name = f"{np_}_{'h5' if path == H5 else 'nc'}"
        outputs[name] = os.path.join(WORK, f"pred_{name}.nc")
        out = run(np_, "predict", TINY, f"--set=parallelism={LAYOUT[np_]}", f"--set=data.path={path}",
                  f"--set=data.stats={stats}", f"--set=predict.checkpoint={ck}", "--set=predict.steps=12",
                  "--set=predict.initial_time=3", "--set=predict.log_every=5", f"--set=predict.output={outputs[name]}")
        lines = re.findall(r"predict +\d+/12  step [0-9.]+ ms .* eta", out)
        if len(lines) != 3 or "wrote " + outputs[name] not in out:
            fail(f"predict at {np_} ranks: expected 3 progress lines (5, 10, 12) and 'wrote':\n{out}")
    with h5py.File(H5, "r") as f:
        initial = f["fields"][3]
        hours = f["time"][()] / 3600.0
    with h5py.File(outputs["1_nc"], "r") as ref:
        if ref["time"].attrs["units"] != b"hours since 2000-01-01 00:00:00" or \
                ref["time"].attrs["calendar"] != b"standard":
            fail(f"time units/calendar: {dict(ref['time'].attrs)}")
        if not np.allclose(ref["time"][()], hours[3] + 6.0 * np.arange(13)):
            fail(f"time axis {ref['time'][()]}")
        for key, value in (("Conventions", b"CF-1.8"), ("tessera_checkpoint_step", b"8")):
            if ref.attrs[key] != value:
                fail(f"global attribute {key} = {ref.attrs[key]!r}, expected {value!r}")
        for key in ("history", "tessera_version", "tessera_config", "tessera_checkpoint", "source"):
            if key not in ref.attrs:
                fail(f"no global attribute {key}")
        if ref["lat"].attrs["units"] != b"degrees_north" or ref["lon"].attrs["units"] != b"degrees_east":
            fail("lat/lon units")
        with h5py.File(sn, "r") as src:
            for axis in ("lat", "lon"):
                if ref[axis].dtype != src[axis].dtype or not np.array_equal(ref[axis][()], src[axis][()]):
                    fail(f"the forecast's {axis} {ref[axis][()]} is not the input's {src[axis][()]}")
        if not (ref["lat"][0] < 0 and ref["lon"][0] == -180.0):
            fail("the forecast from a south-first, -180..180 input is not south first from longitude -180")
        want = {v: north_first_0_360(ref, v) for v in ("h", "u", "v")}
    with h5py.File(outputs["1_h5"], "r") as f:
        if not (np.all(np.diff(f["lat"][()]) < 0) and f["lon"][0] == 0.0):
            fail("the forecast from tessera's HDF5 layout is not north first from longitude 0")
    for c, v in enumerate(("h", "u", "v")):
        if not np.array_equal(want[v][0], initial[c]):
            fail(f"{v}: the initial state of the output is not the data's time index 3")
    for name, path in outputs.items():
        with h5py.File(path, "r") as f:
            for v in ("h", "u", "v"):
                got = north_first_0_360(f, v)
                if got.shape != (13, 32, 64):
                    fail(f"{path}: {v} has shape {got.shape}")
                scale = float(np.abs(want[v]).max())
                diff = float(np.abs(got - want[v]).max())
                if not diff <= 1e-5 * scale:
                    fail(f"{path}: {v} differs from the 1-rank rollout by {diff} (largest magnitude {scale})")
                print(f"predict {name}: {v} max |diff| vs 1 rank {diff:.3g} ({diff / scale:.2g} of its scale)")
        if name != "1_nc" and not os.path.exists(path):
            fail(f"{path} missing")

    # An existing output is refused without --force, and left as it was.
    target = outputs["1_nc"]
    with open(target, "rb") as f:
        before = f.read()
    again = ["predict", TINY, f"--set=parallelism={LAYOUT[1]}", f"--set=data.path={sn}", f"--set=data.stats={stats}",
             f"--set=predict.checkpoint={ck}", "--set=predict.steps=2", f"--set=predict.output={target}"]
    out = run(1, *again, expect=1)
    if f"tessera-run: error: predict.output '{target}' exists; give --force to replace it" not in out:
        fail(f"predict over an existing output: expected an error naming it and --force:\n{out}")
    with open(target, "rb") as f:
        if f.read() != before:
            fail("a refused predict changed the existing output")
    run(1, *again, "--force")
    with h5py.File(target, "r") as f:
        if f["time"].shape != (3,):
            fail(f"predict --force did not replace the output: time {f['time'][()]}")
    out = run(1, "stats", TINY, f"--set=data.path={sn}", f"--set=data.stats={stats}", "--force", expect=1)
    if "tessera-run: error: --force is for predict only" not in out:
        fail(f"--force outside predict: expected a usage error:\n{out}")
    print("predict: an existing output refused without --force (untouched), replaced with it")
    if glob.glob(os.path.join(WORK, "*.tmp")):
        fail("a temporary output file was left behind")


def mode_readers():
    ncdump = shutil.which("ncdump")
    try:
        import xarray  # noqa: F401
        import netCDF4  # noqa: F401
    except ImportError:
        xarray = None
    if ncdump is None or xarray is None:
        print("SKIPPED: ncdump or python3-xarray/python3-netcdf4 is not installed")
        sys.exit(77)
    import xarray as xr
    sn = make_variants()
    stats = os.path.join(WORK, "stats.yaml")
    run(1, "stats", TINY, f"--set=data.path={TWIN}", f"--set=data.stats={stats}")
    ck = os.path.join(WORK, "ck")
    run(2, TINY, f"--set=parallelism={LAYOUT[2]}", f"--set=data.path={TWIN}", f"--set=data.stats={stats}",
        f"--set=checkpoint.dir={ck}", "--set=schedule.steps=2")
    pred = os.path.join(WORK, "pred.nc")
    run(2, "predict", TINY, f"--set=parallelism={LAYOUT[2]}", f"--set=data.path={sn}", f"--set=data.stats={stats}",
        f"--set=predict.checkpoint={ck}", "--set=predict.steps=4", f"--set=predict.output={pred}")
    for path in (TWIN, sn, pred):
        p = subprocess.run([ncdump, "-h", path], capture_output=True, text=True)
        if p.returncode != 0 or "float h(time, lat, lon)" not in p.stdout:
            fail(f"ncdump -h {path}:\n{p.stdout}{p.stderr}")
    ds = xr.open_dataset(pred, engine="netcdf4")
    if str(ds.time.dtype) != "datetime64[ns]" or str(ds.time.values[0])[:19] != "2000-01-01T00:00:00":
        fail(f"xarray did not decode the CF time: {ds.time.values}")
    if ds.h.dims != ("time", "lat", "lon") or ds.h.shape != (5, 32, 64) or ds.u.attrs["units"] != "m s-1":
        fail(f"xarray: {ds}")
    with h5py.File(pred, "r") as f:
        if not np.array_equal(ds.h.values, f["h"][()]):
            fail("xarray's values differ from the file's")
    twin = xr.open_dataset(TWIN, engine="netcdf4")
    if twin.h.shape != (121, 32, 64) or float(twin.lat[0]) <= 0:
        fail(f"xarray: the twin {twin}")
    print(f"readers: ncdump and xarray open the twin and a prediction ({dict(ds.sizes)})")


def import_netcdf4_xarray():
    """netCDF4 and xarray; exits 77 (CTest: skipped) when either is not installed."""
    try:
        import netCDF4
        import xarray
    except ImportError:
        print("SKIPPED: python3-netcdf4 or python3-xarray is not installed")
        sys.exit(77)
    return netCDF4, xarray


LEVELS_SHAPE = (12, 2, 32, 64)  # time, level, lat, lon of write_levels_file


def write_levels_file(path):
    """h(time, lat, lon) and t(time, level, lat, lon) on levels 850 and 500 hPa, written with
    netCDF4-python in tessera's orientation (lat north first on cell centres, lon from 0,
    float64 axes); returns lat, lon and the f32 values of h and t as stored."""
    import netCDF4
    nt, nlev, nlat, nlon = LEVELS_SHAPE
    rng = np.random.default_rng(7)
    lat = np.linspace(87.1875, -87.1875, nlat)
    lon = np.arange(nlon) * (360.0 / nlon)
    phase = np.arange(nt)[:, None, None] * 0.3
    wave = np.sin(np.radians(lon)[None, None, :] * 2 + phase) * np.cos(np.radians(lat))[None, :, None]
    h = (1000.0 + 50.0 * wave + rng.normal(0, 1, (nt, nlat, nlon))).astype(np.float32)
    t = np.stack([280.0 + 5.0 * wave, 250.0 + 3.0 * np.roll(wave, 3, axis=2)], axis=1).astype(np.float32)
    with netCDF4.Dataset(path, "w", format="NETCDF4") as ds:
        for name, size in (("time", nt), ("level", nlev), ("lat", nlat), ("lon", nlon)):
            ds.createDimension(name, size)
        for name, units, values in (("time", "hours since 2000-01-01 00:00:00", 6.0 * np.arange(nt)),
                                    ("level", "hPa", np.array([850.0, 500.0])),
                                    ("lat", "degrees_north", lat), ("lon", "degrees_east", lon)):
            v = ds.createVariable(name, "f8", (name,))
            v.units = units
            v[:] = values
        ds["time"].calendar = "standard"
        ds.createVariable("h", "f4", ("time", "lat", "lon"))[:] = h
        ds.createVariable("t", "f4", ("time", "level", "lat", "lon"))[:] = t
    return lat, lon, h, t


def mode_levels():
    netCDF4, xr = import_netcdf4_xarray()
    path = os.path.join(WORK, "levels.nc")
    write_levels_file(path)
    nt, nlev, nlat, nlon = LEVELS_SHAPE
    cfg = [TINY, f"--set=data.path={path}", "--set=data.variables=[h, t]"]
    stats = {}
    for np_ in (1, 2):
        stats[np_] = os.path.join(WORK, f"stats_{np_}.yaml")
        run(np_, "stats", *cfg, f"--set=parallelism={LAYOUT[np_]}", f"--set=data.stats={stats[np_]}")
    if stats_of(stats[1]) != stats_of(stats[2]) or len(stats_of(stats[1])) != 3:
        fail(f"level statistics: 3 channels expected, the same at 1 and 2 ranks:\n{stats_of(stats[1])}\n"
             f"{stats_of(stats[2])}")
    names = open(stats[1]).read()
    if "t@850" not in names or "t@500" not in names:
        fail(f"the level channels are not named t@<level>:\n{names}")
    ck = os.path.join(WORK, "ck")
    run(2, *cfg, f"--set=parallelism={LAYOUT[2]}", f"--set=data.stats={stats[1]}", f"--set=checkpoint.dir={ck}",
        "--set=schedule.steps=2")
    pred = os.path.join(WORK, "pred.nc")
    run(2, "predict", *cfg, f"--set=parallelism={LAYOUT[2]}", f"--set=data.stats={stats[1]}",
        f"--set=predict.checkpoint={ck}", "--set=predict.steps=3", "--set=predict.initial_time=4",
        f"--set=predict.output={pred}")
    out = xr.open_dataset(pred, engine="netcdf4")
    if out.t.dims != ("time", "level", "lat", "lon") or out.t.shape != (4, nlev, nlat, nlon):
        fail(f"predict: t is {out.t.dims} {out.t.shape}, expected (time, level, lat, lon) (4, 2, 32, 64)")
    if list(out.level.values) != [850.0, 500.0]:
        fail(f"predict: the level coordinate is {out.level.values}")
    with netCDF4.Dataset(path) as src:
        if not np.array_equal(out.t.values[0], np.asarray(src["t"][4])) or \
                not np.array_equal(out.h.values[0], np.asarray(src["h"][4])):
            fail("predict: the initial state is not the input's time index 4")
    print(f"levels: channels h, t@850, t@500; predict wrote t{out.t.dims} and xarray read it back")


def same_attributes(a, b):
    """Whether two attribute dicts (netCDF4 or xarray) hold the same names in the same
    order and the same values, numbers of the same dtype bit for bit (a NaN too)."""
    if list(a) != list(b):
        return False
    for key in a:
        x, y = a[key], b[key]
        if isinstance(x, str) or isinstance(y, str):
            if x != y:
                return False
        elif np.asarray(x).dtype != np.asarray(y).dtype or np.asarray(x).tobytes() != np.asarray(y).tobytes():
            return False
    return True


def mode_conventions():
    netCDF4, xr = import_netcdf4_xarray()
    # The same data twice: tessera's orientation with lat/lon names and float64 axes, and
    # as ERA5 files come (south first in float32, -180..180, int32 time and level).
    north = os.path.join(WORK, "north.nc")
    lat, lon, h, t = write_levels_file(north)
    nt, _, nlat, nlon = LEVELS_SHAPE
    era5 = os.path.join(WORK, "era5.nc")
    rows = np.arange(nlat)[::-1]                                   # south first
    era5_lon = -180.0 + np.arange(nlon) * (360.0 / nlon)           # -180 .. 174.375
    cols = np.rint(np.mod(era5_lon, 360.0) / (360.0 / nlon)).astype(int)
    with netCDF4.Dataset(era5, "w", format="NETCDF4") as ds:
        for name, size in (("time", nt), ("level", 2), ("latitude", nlat), ("longitude", nlon)):
            ds.createDimension(name, size)
        v = ds.createVariable("time", "i4", ("time",))
        v.long_name, v.units, v.calendar = "time", "hours since 1900-01-01 00:00:00", "gregorian"
        v[:] = 876576 + 6 * np.arange(nt)  # 2000-01-01 00:00 onwards
        v = ds.createVariable("level", "i4", ("level",))
        v.units, v.long_name, v.standard_name, v.positive = "millibars", "pressure_level", "air_pressure", "down"
        v.axis = "Z"
        v.valid_range = np.array([1, 1000], dtype=np.int32)
        v[:] = np.array([850, 500], dtype=np.int32)
        v = ds.createVariable("latitude", "f4", ("latitude",))
        v.units, v.long_name, v.standard_name, v.axis = "degrees_north", "latitude", "latitude", "Y"
        v.valid_range = np.array([-90, 90], dtype=np.float32)
        v[:] = lat[rows].astype(np.float32)
        v = ds.createVariable("longitude", "f8", ("longitude",), fill_value=np.nan)  # as xarray writes it
        v.units, v.long_name, v.standard_name, v.axis = "degrees_east", "longitude", "longitude", "X"
        v[:] = era5_lon
        v = ds.createVariable("h", "f4", ("time", "latitude", "longitude"))
        v.units, v.long_name = "m", "geopotential height"
        v[:] = h[:, rows][..., cols]
        v = ds.createVariable("t", "f4", ("time", "level", "latitude", "longitude"))
        v.units, v.long_name = "K", "temperature"
        v[:] = t[:, :, rows][..., cols]
    if not np.array_equal(lat[rows].astype(np.float32), lat[rows]):
        fail("the fixture's latitudes are not exact in float32")

    cfg = [TINY, "--set=data.variables=[h, t]"]
    stats = os.path.join(WORK, "stats.yaml")
    run(1, "stats", *cfg, f"--set=data.path={north}", f"--set=data.stats={stats}")
    ck = os.path.join(WORK, "ck")
    run(2, *cfg, f"--set=parallelism={LAYOUT[2]}", f"--set=data.path={north}", f"--set=data.stats={stats}",
        f"--set=checkpoint.dir={ck}", "--set=schedule.steps=2")
    first, steps = 4, 3
    for np_ in (1, 4):
        forecasts = {}
        for name, path in (("north", north), ("era5", era5)):
            forecasts[name] = os.path.join(WORK, f"forecast_{name}_{np_}.nc")
            run(np_, "predict", *cfg, f"--set=parallelism={LAYOUT[np_]}", f"--set=data.path={path}",
                f"--set=data.stats={stats}", f"--set=predict.checkpoint={ck}", f"--set=predict.steps={steps}",
                f"--set=predict.initial_time={first}", f"--set=predict.output={forecasts[name]}")
        what = f"the forecast from the ERA5-like file at {np_} ranks"

        # The coordinate variables as the input holds them: names, dimensions, values,
        # dtypes, attributes and their order; time in the input's dtype and units.
        with netCDF4.Dataset(era5) as src, netCDF4.Dataset(forecasts["era5"]) as out:
            if list(out.dimensions) != list(src.dimensions):
                fail(f"{what}: dimensions {list(out.dimensions)}, the input's are {list(src.dimensions)}")
            for name in ("time", "level", "latitude", "longitude"):
                a, b = src[name], out[name]
                b.set_auto_maskandscale(False)
                a.set_auto_maskandscale(False)
                if b.dtype != a.dtype or b.dimensions != a.dimensions:
                    fail(f"{what}: coordinate {name} is {b.dtype}{b.dimensions}, the input's {a.dtype}{a.dimensions}")
                got = {k: b.getncattr(k) for k in b.ncattrs()}
                want = {k: a.getncattr(k) for k in a.ncattrs()}
                if not same_attributes(got, want):
                    fail(f"{what}: coordinate {name} has attributes {got}, the input's are {want}")
                expected = a[first:first + steps + 1] if name == "time" else a[:]
                if not np.array_equal(b[:], expected):
                    fail(f"{what}: coordinate {name} is {b[:]}, expected {expected}")
            for v in ("h", "t"):
                if out[v].dimensions != src[v].dimensions:
                    fail(f"{what}: {v}{out[v].dimensions}, the input's is {v}{src[v].dimensions}")

        # xarray: the forecast aligns with the input exactly, and the difference has
        # the input's dimensions (no broadcast over a second set of coordinates).
        fc = xr.open_dataset(forecasts["era5"], engine="netcdf4")
        inp = xr.open_dataset(era5, engine="netcdf4")
        for name in ("level", "latitude", "longitude"):
            if fc[name].dtype != inp[name].dtype or not same_attributes(fc[name].attrs, inp[name].attrs):
                fail(f"{what}: xarray reads {name} as {fc[name].dtype} {fc[name].attrs}, the input as "
                     f"{inp[name].dtype} {inp[name].attrs}")
        try:
            xr.align(fc, inp.isel(time=slice(first, first + steps + 1)), join="exact")
        except ValueError as e:
            fail(f"{what}: xarray cannot align it exactly with the input: {e}")
        diff = fc - inp
        for v in ("h", "t"):
            if diff[v].dims != inp[v].dims:
                fail(f"{what}: forecast - input has {v}{diff[v].dims}, the input {v}{inp[v].dims}")
        want_sizes = {"time": steps + 1, "level": 2, "latitude": nlat, "longitude": nlon}
        if dict(diff.sizes) != want_sizes:
            fail(f"{what}: forecast - input has sizes {dict(diff.sizes)}, expected {want_sizes}")
        for v in ("h", "t"):
            if float(np.abs(diff[v].isel(time=0)).max()) != 0.0:
                fail(f"{what}: its initial state minus the input at the same coordinates is not zero ({v})")

        # Values at coordinates: the forecast from the north-first, 0..360 copy, re-indexed
        # by its coordinates onto the ERA5 grid, is the same forecast bit for bit.
        ref = xr.open_dataset(forecasts["north"], engine="netcdf4")
        if ref.h.dims != ("time", "lat", "lon") or not (float(ref.lat[0]) > 0 and float(ref.lon[0]) == 0.0):
            fail(f"the forecast from the north-first file is not north first on lat/lon from 0: {ref}")
        ref = ref.rename({"lat": "latitude", "lon": "longitude"})
        ref = ref.assign_coords(longitude=np.mod(ref.longitude.values + 180.0, 360.0) - 180.0)
        ref = ref.sel(latitude=fc.latitude.values.astype(np.float64), longitude=fc.longitude.values)
        for v in ("h", "t"):
            if not np.array_equal(fc[v].values, ref[v].values):
                worst = float(np.abs(fc[v].values - ref[v].values).max())
                fail(f"{what}: {v} differs from the north-first forecast at the same coordinates by {worst}")
        if not (float(np.abs(fc.t.isel(time=steps) - fc.t.isel(time=0)).max()) > 0):
            fail(f"{what}: the model did not change the state (the comparison would prove nothing)")
        for ds in (fc, inp, ref):
            ds.close()
        print(f"conventions: {np_} rank(s): coordinates, dtypes and attributes kept; forecast - input "
              f"{dict(diff.sizes)}; every value at its coordinates equals the north-first forecast's")

    # An int32 time in days cannot hold the 6-hour steps: float64, with a warning, the
    # input's units kept.
    days = os.path.join(WORK, "era5_days.nc")
    shutil.copy(era5, days)
    with netCDF4.Dataset(days, "a") as ds:
        ds["time"].units = "days since 2000-01-01 00:00:00"
        ds["time"][:] = np.arange(nt, dtype=np.int32)
    out_days = os.path.join(WORK, "forecast_days.nc")
    out = run(1, "predict", *cfg, f"--set=parallelism={LAYOUT[1]}", f"--set=data.path={days}",
              f"--set=data.stats={stats}", f"--set=predict.checkpoint={ck}", f"--set=predict.steps={steps}",
              f"--set=predict.initial_time={first}", f"--set=predict.output={out_days}")
    if "warning: predict.output: the output times are not all int32 values" not in out:
        fail(f"an int32 time in days with 6-hour steps: expected a warning:\n{out}")
    with netCDF4.Dataset(out_days) as f:
        if f["time"].dtype != np.float64 or f["time"].units != "days since 2000-01-01 00:00:00" or \
                not np.array_equal(f["time"][:], first + 0.25 * np.arange(steps + 1)):
            fail(f"an int32 time in days with 6-hour steps: time is {f['time'].dtype} {f['time'][:]}")
    print("conventions: an int32 time that cannot hold the steps is written as float64, with a warning")


def mode_regional():
    try:
        import netCDF4
    except ImportError:
        print("SKIPPED: python3-netcdf4 is not installed")
        sys.exit(77)
    path = os.path.join(WORK, "regional.nc")
    lat = 86.5 - 0.5 * np.arange(44)
    lon = 10.0 + 0.5 * np.arange(16)
    nt = 8
    with netCDF4.Dataset(path, "w", format="NETCDF4") as ds:
        for name, size in (("time", nt), ("lat", lat.size), ("lon", lon.size)):
            ds.createDimension(name, size)
        for name, units, values in (("time", "hours since 2000-01-01 00:00:00", 6.0 * np.arange(nt)),
                                    ("lat", "degrees_north", lat), ("lon", "degrees_east", lon)):
            v = ds.createVariable(name, "f8", (name,))
            v.units = units
            v[:] = values
        phase = np.arange(nt)[:, None, None] * 0.3
        h = ds.createVariable("h", "f4", ("time", "lat", "lon"))
        h[:] = 1000.0 + 50.0 * np.sin(np.radians(lon)[None, None, :] * 8 + phase) * np.cos(np.radians(lat))[None, :, None]
    cfg = [TINY, f"--set=data.path={path}", "--set=data.variables=[h]", "--set=data.normalize=false",
           "--set=schedule.steps=2", "--set=schedule.log_every=1"]
    losses = {}
    for np_ in (1, 2):
        ck = os.path.join(WORK, f"ck{np_}")
        out = run(np_, *cfg, f"--set=parallelism={LAYOUT[np_]}", f"--set=checkpoint.dir={ck}")
        if "(explicit_rows)" not in out:
            fail(f"the regional grid is not weighted by its own latitudes (no explicit_rows in the log):\n{out}")
        losses[np_] = re.findall(r"loss ([0-9.e+-]+)", out)
        info = subprocess.run([CKPT, "info", ck], capture_output=True, text=True).stdout
        if "explicit_rows" not in info or "86.5" not in info or "65" not in info:
            fail(f"the checkpoint's model does not keep the latitudes:\n{info}")
    if not losses[1] or losses[1] != losses[2]:
        fail(f"regional losses differ between 1 and 2 ranks: {losses[1]} {losses[2]}")
    print(f"regional: explicit_rows, losses {losses[1]} at 1 and 2 ranks")


os.makedirs(WORK, exist_ok=True)
for old in glob.glob(os.path.join(WORK, "*")):
    shutil.rmtree(old) if os.path.isdir(old) else os.remove(old)
{"input": mode_input, "predict": mode_predict, "readers": mode_readers, "levels": mode_levels,
 "regional": mode_regional, "conventions": mode_conventions}[MODE]()
print(f"netcdf {MODE}: passed")
