"""The built-in tasks, one file each; every module here registers its task with `tinygrpo.task.register_task`."""
