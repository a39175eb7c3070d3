"""TrainingJobs: reading them (`spec`), the objects that run them (`pods`), what
their status says (`status`) and the admission policies that guard who may
create and change them (`admission`, CEL run by the API server). Pure; the
controller loops that use these live at the edge with the API client."""
