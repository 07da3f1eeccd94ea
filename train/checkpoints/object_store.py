"""What a gs:// workdir needs beyond reading and writing files (epath):
writing an object only if it is absent or still a known version, deleting
one known version, moving a directory's objects (server-side copies), and
the store's own per-object hashes (CRC32C), read from its listing without
downloading the objects.

Through google-cloud-storage, which honours STORAGE_EMULATOR_HOST: a local
emulator (fake-gcs-server) stands in for Cloud Storage in the tests.
"""

from __future__ import annotations

import functools

SCHEME = "gs://"


def is_gcs(path) -> bool:
  return str(path).startswith(SCHEME)


def _split(path) -> tuple[str, str]:
  """(bucket, object name) of a gs:// path."""
  text = str(path)
  if not is_gcs(text):
    raise ValueError(f"{text}: not a {SCHEME} path.")
  bucket, _, name = text[len(SCHEME):].partition("/")
  if not bucket or not name:
    raise ValueError(f"{text}: expected {SCHEME}BUCKET/OBJECT.")
  return bucket, name


@functools.lru_cache(maxsize=None)
def _client():
  from google.cloud import storage  # pylint: disable=g-import-not-at-top
  return storage.Client()


def _blob(path):
  bucket, name = _split(path)
  return _client().bucket(bucket).blob(name)


def write_if_generation(path, data: bytes, generation: int) -> int | None:
  """Writes `data` to the object `path` only if its current generation is
  `generation` (0: only if there is no object), a precondition the store
  checks, so of several writers expecting the same generation exactly one
  succeeds. Returns the new object's generation, or None when the
  precondition failed."""
  from google.api_core import exceptions  # pylint: disable=g-import-not-at-top
  blob = _blob(path)
  try:
    blob.upload_from_string(data, if_generation_match=generation)
  except exceptions.PreconditionFailed:
    return None
  return int(blob.generation)


def read(path) -> tuple[bytes, int] | None:
  """(contents, generation) of the object `path`, or None if absent."""
  from google.api_core import exceptions  # pylint: disable=g-import-not-at-top
  bucket, name = _split(path)
  blob = _client().bucket(bucket).get_blob(name)
  if blob is None:
    return None
  try:
    return blob.download_as_bytes(if_generation_match=blob.generation), int(
        blob.generation)
  except (exceptions.PreconditionFailed, exceptions.NotFound):
    return read(path)  # replaced or deleted since listed: read it again


def delete_generation(path, generation: int) -> bool:
  """Deletes the object `path` if it is still `generation`. Returns whether
  it did (False: replaced or already deleted)."""
  from google.api_core import exceptions  # pylint: disable=g-import-not-at-top
  try:
    _blob(path).delete(if_generation_match=generation)
  except (exceptions.PreconditionFailed, exceptions.NotFound):
    return False
  return True


def object_hashes(directory) -> dict[str, tuple[str, int]]:
  """{path relative to `directory`: (base64 CRC32C, size)} of every object
  under the gs:// `directory`, from one listing (no object is read)."""
  bucket, prefix = _split(str(directory).rstrip("/") + "/")
  return {blob.name[len(prefix):]: (blob.crc32c, int(blob.size))
          for blob in _client().list_blobs(bucket, prefix=prefix)}


def move_tree(source, target) -> None:
  """Moves every object under the gs:// directory `source` to the same
  path under `target` (copied within the store, then deleted)."""
  bucket_name, prefix = _split(str(source).rstrip("/") + "/")
  target_bucket, target_prefix = _split(str(target).rstrip("/") + "/")
  bucket = _client().bucket(bucket_name)
  destination = _client().bucket(target_bucket)
  for blob in list(_client().list_blobs(bucket_name, prefix=prefix)):
    bucket.copy_blob(blob, destination,
                     target_prefix + blob.name[len(prefix):])
    blob.delete()
