#ifndef ASYNCPS_INCLUDE_ASYNCPS_DATASETS_H_
#define ASYNCPS_INCLUDE_ASYNCPS_DATASETS_H_

// Public API: input pipelines (asyncps::data::Dataset, Iterator, Element and the sources and
// transforms, AutoShardPolicy, iterator SaveState/RestoreIterator). Contracts are on each
// declaration.

#include "data/dataset.h"  // IWYU pragma: export

#endif  // ASYNCPS_INCLUDE_ASYNCPS_DATASETS_H_
