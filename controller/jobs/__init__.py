"""TrainingJobs: reading them (`spec`), the objects that run them (`pods`) and
what their status says (`status`). Pure; the controller loops that use these
live at the edge with the API client."""
