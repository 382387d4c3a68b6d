# Stage: tables. Rules, target rule `tables`, and the files it registers with register_targets().
