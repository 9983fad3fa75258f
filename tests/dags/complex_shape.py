"""The shape of Airflow's example_complex as a native DAG: 37 tasks, not series-parallel, the
plan nests barriers (chords) inside a chain that ends in a group inside a chord's header."""

from beatflow import DAG, task


@task
def t():
    return 1


with DAG("t_native_complex"):
    create_entry_group = t.override(task_id="create_entry_group")()
    create_entry_group_result = t.override(task_id="create_entry_group_result")()
    create_entry_group_result2 = t.override(task_id="create_entry_group_result2")()
    create_entry_gcs = t.override(task_id="create_entry_gcs")()
    create_entry_gcs_result = t.override(task_id="create_entry_gcs_result")()
    create_entry_gcs_result2 = t.override(task_id="create_entry_gcs_result2")()
    create_tag_template = t.override(task_id="create_tag_template")()
    create_tag_template_result = t.override(task_id="create_tag_template_result")()
    create_tag_template_result2 = t.override(task_id="create_tag_template_result2")()
    create_tag_template_field = t.override(task_id="create_tag_template_field")()
    create_tag = t.override(task_id="create_tag")()
    create_tag_result = t.override(task_id="create_tag_result")()
    create_tag_result2 = t.override(task_id="create_tag_result2")()
    create_tag_template_field_result = t.override(task_id="create_tag_template_field_result")()
    create_tag_template_field_result2 = t.override(task_id="create_tag_template_field_result2")()
    get_entry_group = t.override(task_id="get_entry_group")()
    get_entry_group_result = t.override(task_id="get_entry_group_result")()
    get_entry = t.override(task_id="get_entry")()
    get_entry_result = t.override(task_id="get_entry_result")()
    get_tag_template = t.override(task_id="get_tag_template")()
    get_tag_template_result = t.override(task_id="get_tag_template_result")()
    list_tags = t.override(task_id="list_tags")()
    list_tags_result = t.override(task_id="list_tags_result")()
    lookup_entry = t.override(task_id="lookup_entry")()
    lookup_entry_result = t.override(task_id="lookup_entry_result")()
    search_catalog = t.override(task_id="search_catalog")()
    search_catalog_result = t.override(task_id="search_catalog_result")()
    update_entry = t.override(task_id="update_entry")()
    update_tag = t.override(task_id="update_tag")()
    delete_tag = t.override(task_id="delete_tag")()
    update_tag_template = t.override(task_id="update_tag_template")()
    update_tag_template_field = t.override(task_id="update_tag_template_field")()
    rename_tag_template_field = t.override(task_id="rename_tag_template_field")()
    delete_tag_template_field = t.override(task_id="delete_tag_template_field")()
    delete_tag_template = t.override(task_id="delete_tag_template")()
    delete_entry_group = t.override(task_id="delete_entry_group")()
    delete_entry = t.override(task_id="delete_entry")()
    create_entry_group >> create_entry_group_result
    create_entry_group >> create_entry_group_result2
    create_entry_group >> create_entry_gcs
    create_entry_gcs >> create_entry_gcs_result
    create_entry_gcs >> create_entry_gcs_result2
    create_entry_gcs >> create_tag_template
    create_tag_template >> create_tag_template_result
    create_tag_template >> create_tag_template_result2
    create_tag_template >> create_tag_template_field
    create_tag_template_field >> create_tag
    create_tag >> create_tag_result
    create_tag >> create_tag_result2
    create_tag_template_field >> create_tag_template_field_result
    create_tag_template_field >> create_tag_template_field_result2
    create_entry_group >> get_entry_group
    get_entry_group >> get_entry_group_result
    create_entry_gcs >> get_entry
    get_entry >> get_entry_result
    create_tag_template >> get_tag_template
    get_tag_template >> get_tag_template_result
    create_tag >> list_tags
    list_tags >> list_tags_result
    create_entry_gcs >> lookup_entry
    lookup_entry >> lookup_entry_result
    create_entry_gcs >> search_catalog
    create_entry_group >> search_catalog
    create_tag >> search_catalog
    create_tag_template >> search_catalog
    create_tag_template_field >> search_catalog
    search_catalog >> search_catalog_result
    create_entry_gcs >> update_entry
    create_tag >> update_tag
    create_tag >> delete_tag
    list_tags >> delete_tag
    search_catalog >> delete_tag
    update_tag >> delete_tag
    create_tag_template >> update_tag_template
    create_tag_template_field >> update_tag_template_field
    create_tag_template_field >> rename_tag_template_field
    update_tag_template_field >> rename_tag_template_field
    create_tag_template >> delete_tag_template_field
    create_tag_template_field >> delete_tag_template_field
    delete_tag >> delete_tag_template_field
    rename_tag_template_field >> delete_tag_template_field
    search_catalog >> delete_tag_template_field
    delete_tag_template_field >> delete_tag_template
    get_tag_template >> delete_tag_template
    search_catalog >> delete_tag_template
    update_tag_template >> delete_tag_template
    create_entry_group >> delete_entry_group
    delete_tag_template >> delete_entry_group
    get_entry_group >> delete_entry_group
    search_catalog >> delete_entry_group
    create_entry_gcs >> delete_entry
    delete_entry_group >> delete_entry
    get_entry >> delete_entry
    lookup_entry >> delete_entry
    search_catalog >> delete_entry
    update_entry >> delete_entry
