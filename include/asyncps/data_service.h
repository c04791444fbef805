#ifndef ASYNCPS_INCLUDE_ASYNCPS_DATA_SERVICE_H_
#define ASYNCPS_INCLUDE_ASYNCPS_DATA_SERVICE_H_

// Public API: the tf.data service — register a program dataset with the dispatcher and read it
// through data workers as an ordinary Dataset (asyncps::data_service::RegisterDataset,
// FromDatasetId, Distribute). Contracts are on each declaration.

#include "data_service/service_dataset.h"  // IWYU pragma: export

#endif  // ASYNCPS_INCLUDE_ASYNCPS_DATA_SERVICE_H_
