"""The data path: chunks of the batch, the stream of images and draws, the shared-memory ring,
the prefetcher and the dry run."""
