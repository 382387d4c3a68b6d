# Stage: data. Rules, target rule `data`, and the files it registers with register_targets().
