# Stage: sft. Rules, target rule `sft`, and the files it registers with register_targets().
