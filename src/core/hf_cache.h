// hf_cache.h: resolve `--model` / `--teacher` to a directory: a local directory as given, or a
// hub id (`org/name` or `name`) already in the local Hugging Face cache. Nothing is downloaded.
#ifndef STILL_HF_CACHE_H
#define STILL_HF_CACHE_H

#include "common.h"

// The hub cache in use: $HF_HUB_CACHE, else $HUGGINGFACE_HUB_CACHE, else $HF_HOME/hub, else
// ~/.cache/huggingface/hub. Caller frees.
char *hf_hub_cache_dir(void);

// 1 if s has the form of a hub repo id: `name` or `org/name`, each part of letters, digits,
// '-', '_', '.', not starting with '-' or '.', without "--" or "..".
int hf_is_hub_id(const char *s);

// model: an existing directory (returned as is), or a hub id looked up in the cache as
// models--org--name/refs/<revision> -> snapshots/<commit>/. revision: NULL or "" = "main"; a
// branch or tag name under refs/, or a commit hash (full, or a unique prefix of at least 7 hex
// digits). *dir: caller frees. A model that is neither is ST_ENOTFOUND with a message naming the
// places searched and how to fetch it on a machine with network.
Status hf_resolve_model(const char *model, const char *revision, char **dir, Err *e);

#endif
