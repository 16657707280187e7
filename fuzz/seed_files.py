"""What the seed scripts share (fuzz/make_capi_seeds.py, fuzz/make_checkpoint_reader_seeds.py):
writing their byte strings into a corpus or findings directory."""
import os


def write_files(directory, files):
    """Writes each name -> bytes of `files` to directory/name (the directory created if
    needed) and prints each path with its size."""
    os.makedirs(directory, exist_ok=True)
    for name, data in files.items():
        path = os.path.join(directory, name)
        with open(path, "wb") as f:
            f.write(data)
        print(f"{path} ({len(data)} bytes)")
