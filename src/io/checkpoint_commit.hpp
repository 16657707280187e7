#pragma once
// Private: committing a finished save (rename into place, the `latest` pointer,
// keep_last rotation) and the nonce that names its temporary files.

#include <string>

namespace tessera::io::detail {

// Renames temp_dir to final_dir under root (moving an existing final_dir aside first),
// points root/latest at it and, when keep_last > 0, removes the oldest step directories.
void commit(const std::string& root, const std::string& temp_dir, const std::string& final_dir,
            const std::string& nonce, int keep_last);

// "<pid>-<ns since epoch, hex>": unique per save, for the temporary directory and pointer.
std::string make_nonce();

}  // namespace tessera::io::detail
